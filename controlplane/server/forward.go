package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
)

// forwardedHeader marks a request a follower passed on, so it is never
// passed on twice (a stale leader view could otherwise bounce it).
const forwardedHeader = rest.ForwardedHeader

// local reports whether a path is answered by whichever node receives it:
// health, metrics, the document, the launcher's static files and the
// edge's route stream (any node's replica will do), and a server's own
// sealing key ids and Raft view. The API, the public launch pages (they launch demos),
// Git push webhooks, agent registration and the edges' certificate
// storage go to the leader.
func local(path string) bool {
	// Blobs are served by the server that holds them, not the leader.
	if path == "/healthz" || path == "/metrics" || path == "/api/openapi.json" || strings.HasPrefix(path, "/internal/blobs/") ||
		path == api.KeyringPath || path == api.RaftStatusPath {
		return true
	}
	return !(strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/internal/") || path == "/mcp" || strings.HasPrefix(path, "/shots/") ||
		strings.HasPrefix(path, "/launch/") || strings.HasPrefix(path, "/connect/") || strings.HasPrefix(path, "/hooks/") ||
		strings.HasPrefix(path, "/"+agentv1connect.RegistryServiceName+"/") ||
		strings.HasPrefix(path, "/"+edgev1connect.CertStorageServiceName+"/"))
}

// forward sends API requests to the leader, so every write goes through
// the one Apply path and every read sees committed state (revoked tokens
// included). On the leader, a read first confirms leadership with a
// quorum, so a deposed leader cannot serve stale data.
func (s *Server) forward(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if local(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		leaderURL, self, err := s.waitLeader(r.Context())
		if err != nil {
			apierr.Write(w, err)
			return
		}
		if self {
			if r.Method == http.MethodGet {
				if err := s.node.VerifyLeader(); err != nil {
					apierr.Write(w, apierr.Unavailable("leadership is changing; retry the request"))
					return
				}
			}
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get(forwardedHeader) != "" {
			apierr.Write(w, apierr.Unavailable("leadership is changing; retry the request"))
			return
		}
		rest.SetRoute(r.Context(), "forwarded to leader")
		target, err := url.Parse(leaderURL)
		if err != nil {
			apierr.Write(w, fmt.Errorf("leader url %q: %w", leaderURL, err))
			return
		}
		leaderProxy(target, s.peers.Transport, s.node.ID(), s.vouch, s.log).ServeHTTP(w, r)
	})
}

// maxHeldAnswer bounds the part of the leader's answer to a forwarded
// write that a follower holds before passing any of it on. The API's
// answers are far smaller; a larger one is streamed past the bound.
const maxHeldAnswer = 1 << 20

// leaderProxy passes one request on to the leader at target, marked as
// forwarded by self; vouch adds who the client is. When the leader does
// not answer, or its answer to a write is cut off, the client learns
// whether the request may have been applied.
func leaderProxy(target *url.URL, transport http.RoundTripper, self string, vouch func(in *http.Request, out http.Header), log *slog.Logger) http.Handler {
	// sent records that the request reached the leader's connection: from
	// then on a write may have been applied even if no answer comes back.
	var sent atomic.Bool
	return &httputil.ReverseProxy{
		Transport: transport,
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// A write's answer is read whole before any of it is passed on.
		// Streamed as it comes, an answer the leader died in the middle
		// of could only be dropped with the connection: the client would
		// learn nothing, and HTTP clients resend a request that carries
		// an Idempotency-Key on their own when a connection closes
		// unanswered, so the resend's "nothing was written" (the leader
		// is gone by then) would hide that the first one was applied.
		// Streams, protocol switches and answers with trailers pass as
		// they come.
		ModifyResponse: func(res *http.Response) error {
			if readOnly(res.Request.Method) || streamed(res.Header.Get("Content-Type")) ||
				res.StatusCode == http.StatusSwitchingProtocols || len(res.Trailer) > 0 {
				return nil
			}
			if err := holdBody(res, maxHeldAnswer); err != nil {
				return fmt.Errorf("read the leader's answer: %w", err)
			}
			return nil
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(forwardedHeader, self)
			// The leader keeps the rate limits: tell it who the client is.
			vouch(pr.In, pr.Out.Header)
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), &httptrace.ClientTrace{
				WroteHeaders: func() { sent.Store(true) },
			}))
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("forward to leader failed", "component", "server", "leader", target.String(), "err", err)
			apierr.Write(w, forwardError(r.Method, sent.Load()))
		},
	}
}

// readOnly reports whether a method never changes anything.
func readOnly(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// streamed reports whether a content type is one whose body arrives over
// time (events, Connect and gRPC streams): it is passed on as it comes.
func streamed(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream" || strings.HasPrefix(mt, "application/connect+") || strings.HasPrefix(mt, "application/grpc")
}

// holdBody reads res's body into memory up to limit bytes, so that a
// body cut short is an error here rather than a truncated answer. A body
// longer than limit keeps the rest streaming behind what was read.
func holdBody(res *http.Response, limit int64) error {
	held, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err != nil {
		res.Body.Close()
		return err
	}
	if int64(len(held)) > limit {
		res.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(held), res.Body), res.Body}
		return nil
	}
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(held))
	res.ContentLength = int64(len(held))
	res.TransferEncoding = nil
	res.Header.Set("Content-Length", strconv.Itoa(len(held)))
	return nil
}

// forwardError is the answer when the leader did not answer a forwarded
// request, or cut its answer off. Before the request went out nothing
// happened; after, a write may have been applied, and the client must not
// be told otherwise.
func forwardError(method string, sent bool) *apierr.Error {
	if sent && !readOnly(method) {
		return apierr.OutcomeUnknown("the leader stopped answering after it received the request: " +
			"the change may or may not have been applied; retry with the same Idempotency-Key, or check before retrying without one")
	}
	return apierr.Unavailable("the leader could not be reached; nothing was written, retry the request")
}

// waitLeader returns the leader's cluster URL, or self=true when this node leads
// and has caught up, waiting out an election for up to cfg.LeaderWait.
func (s *Server) waitLeader(ctx context.Context) (string, bool, error) {
	wait := s.cfg.LeaderWait
	if wait == 0 {
		wait = 5 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		if s.node.IsLeader() {
			return s.url, true, nil
		}
		if u := s.node.LeaderCluster(); u != "" && u != s.clusterURL {
			return u, false, nil
		}
		if time.Now().After(deadline) {
			return "", false, apierr.Unavailable("no leader is elected yet; retry the request")
		}
		select {
		case <-ctx.Done():
			return "", false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// joinLoop asks the configured servers to add this one until one agrees.
// It is owned by the Server and ends on success or Close.
func (s *Server) joinLoop(ctx context.Context) {
	body, _ := json.Marshal(voterRequest{ID: s.node.ID(), RaftAddr: s.raftAdvertise(), APIAddr: s.url, ClusterAddr: s.clusterURL})
	backoff := 100 * time.Millisecond
	for {
		for _, peer := range s.cfg.Join {
			if err := s.joinOnce(ctx, peer, body); err != nil {
				s.log.Info("join attempt failed", "component", "server", "peer", peer, "err", err)
				continue
			}
			s.log.Info("joined cluster", "component", "server", "peer", peer)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (s *Server) raftAdvertise() string {
	if s.cfg.AdvertiseRaftAddr != "" {
		return s.cfg.AdvertiseRaftAddr
	}
	return s.cfg.RaftAddr
}

func (s *Server) joinOnce(ctx context.Context, peer string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(peer, "/")+voterPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.peers.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&env)
		return fmt.Errorf("join refused: %d %s %s", resp.StatusCode, env.Error.Code, env.Error.Message)
	}
	return nil
}
