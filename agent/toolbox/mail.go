package toolbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/runtime"
)

// Email is one message a site sent.
type Email struct {
	ID      string
	From    string
	To      []string
	Subject string
	Date    time.Time
	Text    string
	HTML    string
}

// A listing reads the newest maxMails messages and at most maxMailBytes
// of each (32 MiB in all), inside the site's container.
const (
	maxMails     = 128
	maxMailBytes = 256 << 10
)

// ListEmails returns the site's captured mail, newest first. The files are
// read inside the site's container, so nothing the site puts in its mail
// directory can make the agent read outside the sandbox.
func (b *Box) ListEmails(ctx context.Context, id string) ([]Email, error) {
	res, err := b.sites.Exec(ctx, id, []string{"/bin/sh", "-c",
		`cd /srv/site/mail || exit 0; ls -1t -- *.eml 2>/dev/null | head -n "$1" | while IFS= read -r f; do
[ -f "$f" ] || continue; printf '%s %s\n' "$f" "$(head -c "$2" -- "$f" | wc -c)"; head -c "$2" -- "$f"; done`,
		"sh", strconv.Itoa(maxMails), strconv.Itoa(maxMailBytes)}, nil)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("read mail: exit %d: %s", res.ExitCode, res.Stderr)
	}
	if res.Truncated {
		return nil, fmt.Errorf("read mail: listing over %d bytes", runtime.MaxExecOutput)
	}
	var out []Email
	r := bufio.NewReader(bytes.NewReader(res.Stdout))
	for {
		head, err := r.ReadString('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		name, size, ok := strings.Cut(strings.TrimSpace(head), " ")
		n, cerr := strconv.Atoi(size)
		if !ok || cerr != nil || n < 0 {
			return nil, fmt.Errorf("read mail: bad listing line %q", head)
		}
		raw := make([]byte, n)
		if _, err := io.ReadFull(r, raw); err != nil {
			return nil, fmt.Errorf("read mail: %w", err)
		}
		out = append(out, parseEmail(strings.TrimSuffix(path.Base(name), ".eml"), raw))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID > out[j].ID }) // ids start with the nanosecond time
	return out, nil
}

// ClearEmails deletes the captured mail.
func (b *Box) ClearEmails(ctx context.Context, id string) error {
	res, err := b.sites.Exec(ctx, id, []string{"/bin/sh", "-c", `rm -f /srv/site/mail/*.eml /srv/site/mail/*.tmp`}, nil)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("clear mail: %s", res.Stderr)
	}
	return nil
}

var dec = new(mime.WordDecoder)

func parseEmail(id string, raw []byte) Email {
	e := Email{ID: id}
	if ns, err := strconv.ParseInt(strings.SplitN(id, "-", 2)[0], 10, 64); err == nil {
		e.Date = time.Unix(0, ns).UTC()
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		e.Text = string(raw)
		return e
	}
	h := msg.Header
	decode := func(s string) string {
		if d, err := dec.DecodeHeader(s); err == nil {
			return d
		}
		return s
	}
	e.From, e.Subject = decode(h.Get("From")), decode(h.Get("Subject"))
	if list, err := h.AddressList("To"); err == nil {
		for _, a := range list {
			if a.Name == "" {
				e.To = append(e.To, a.Address)
			} else {
				e.To = append(e.To, a.String())
			}
		}
	} else if to := h.Get("To"); to != "" {
		e.To = []string{decode(to)}
	}
	if d, err := h.Date(); err == nil {
		e.Date = d.UTC()
	}
	body(h.Get("Content-Type"), h.Get("Content-Transfer-Encoding"), msg.Body, &e, 0)
	return e
}

// body fills Text and HTML from a (possibly multipart) body.
func body(contentType, encoding string, r io.Reader, e *Email, depth int) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || contentType == "" {
		mt = "text/plain"
	}
	if strings.HasPrefix(mt, "multipart/") && depth < 5 {
		mr := multipart.NewReader(r, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err != nil {
				return
			}
			body(p.Header.Get("Content-Type"), p.Header.Get("Content-Transfer-Encoding"), p, e, depth+1)
		}
	}
	switch strings.ToLower(encoding) {
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	case "base64":
		r = newBase64(r)
	}
	b, _ := io.ReadAll(io.LimitReader(r, 4<<20))
	switch mt {
	case "text/html":
		if e.HTML == "" {
			e.HTML = string(b)
		}
	case "text/plain":
		if e.Text == "" {
			e.Text = string(b)
		}
	}
}
