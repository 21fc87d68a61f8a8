// Package rpcauth authenticates Connect RPCs between the control plane,
// agents and edges with the cluster token, and builds the h2c clients and
// handlers they talk through.
package rpcauth

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/secret"
)

// Interceptor checks the cluster token on incoming calls and sends it on
// outgoing ones, for unary and streaming RPCs alike.
type Interceptor struct {
	token string
	hash  string
}

// New returns an interceptor for the cluster token.
func New(token string) *Interceptor { return &Interceptor{token: token, hash: secret.Hash(token)} }

func (i *Interceptor) check(h http.Header) error {
	v := h.Get("Authorization")
	tok, ok := strings.CutPrefix(v, "Bearer ")
	if !ok || !secret.Equal(secret.Hash(tok), i.hash) {
		return connect.NewError(connect.CodeUnauthenticated, errUnauthenticated)
	}
	return nil
}

type authError string

func (e authError) Error() string { return string(e) }

const errUnauthenticated = authError("a valid cluster token is required")

// WrapUnary implements connect.Interceptor.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			req.Header().Set("Authorization", "Bearer "+i.token)
		} else if err := i.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+i.token)
		return conn
	}
}

// WrapStreamingHandler implements connect.Interceptor.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// Client is an HTTP client speaking HTTP/2 without TLS (h2c), which
// Connect streams need and which avoids a handshake per call.
func Client() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:       p,
		DialContext:     (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		IdleConnTimeout: 90 * time.Second,
	}}
}

// Protocols lets an http.Server take HTTP/1.1 and h2c on one port.
func Protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}
