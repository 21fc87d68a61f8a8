// Package shots serves the sites' screenshots at short-lived URLs: a
// screenshot stays on its site's node for a quarter of an hour, and its
// URL (signed with a key every server of the cluster derives alike, so
// any of them answers it) fetches it from there. Whoever holds the URL
// sees the picture until it expires, as with a presigned object URL.
package shots

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/apierr"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// Path is the pattern of a screenshot's URL.
const Path = "GET /shots/{node}/{file}"

// Agents reaches the agent of a node.
type Agents interface {
	Agent(nodeID string) (agentv1connect.AgentServiceClient, error)
}

// Signer makes and checks screenshot URLs.
type Signer struct {
	Key  []byte
	Base string // the API's public URL
	Now  func() time.Time
}

func (s Signer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s Signer) sign(node, shot string, expires int64) string {
	m := hmac.New(sha256.New, s.Key)
	m.Write([]byte(node + "\x00" + shot + "\x00" + strconv.FormatInt(expires, 10)))
	return hex.EncodeToString(m.Sum(nil))
}

// URL is where a screenshot kept on node can be fetched until expires.
func (s Signer) URL(node, shot string, expires time.Time) string {
	exp := expires.Unix()
	return strings.TrimSuffix(s.Base, "/") + "/shots/" + node + "/" + shot + ".png?expires=" + strconv.FormatInt(exp, 10) +
		"&sig=" + s.sign(node, shot, exp)
}

var (
	shotRE = regexp.MustCompile(`^([0-9a-f]{32})\.png$`)
	nodeRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
)

// Handler serves screenshot URLs; a bad or expired one is a 404.
func (s Signer) Handler(agents Agents) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, m := r.PathValue("node"), shotRE.FindStringSubmatch(r.PathValue("file"))
		exp, err := strconv.ParseInt(r.URL.Query().Get("expires"), 10, 64)
		notFound := apierr.NotFound(apierr.CodeNotFound, "screenshot")
		if m == nil || !nodeRE.MatchString(node) || err != nil ||
			!hmac.Equal([]byte(r.URL.Query().Get("sig")), []byte(s.sign(node, m[1], exp))) {
			apierr.Write(w, notFound)
			return
		}
		left := time.Unix(exp, 0).Sub(s.now())
		if left <= 0 {
			apierr.Write(w, apierr.NotFound(apierr.CodeNotFound, "screenshot").With("expired", true))
			return
		}
		a, err := agents.Agent(node)
		if err != nil {
			apierr.Write(w, apierr.Unavailable("the screenshot's node is not reachable"))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		resp, err := a.GetScreenshot(ctx, connect.NewRequest(&agentv1.ScreenshotRef{ShotId: m[1]}))
		switch {
		case connect.CodeOf(err) == connect.CodeNotFound:
			apierr.Write(w, notFound)
			return
		case err != nil:
			apierr.Write(w, apierr.Unavailable("the screenshot's node did not answer"))
			return
		}
		h := w.Header()
		h.Set("Content-Type", "image/png")
		h.Set("Cache-Control", "private, max-age="+strconv.Itoa(int(left.Seconds())))
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'")
		h.Set("Content-Length", strconv.Itoa(len(resp.Msg.Png)))
		if r.Method != http.MethodHead {
			_, _ = w.Write(resp.Msg.Png)
		}
	})
}
