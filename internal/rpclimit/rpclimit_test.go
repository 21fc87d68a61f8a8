package rpclimit_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/rpclimit"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// echo answers a Files call with as many bytes as it was sent.
type echo struct {
	agentv1connect.UnimplementedAgentServiceHandler
}

func (echo) Files(_ context.Context, req *connect.Request[agentv1.FilesRequest]) (*connect.Response[agentv1.FilesResponse], error) {
	return connect.NewResponse(&agentv1.FilesResponse{Content: req.Msg.Content}), nil
}

// plain turns gzip off on both sides: compressing tens of MiB is what
// made this test slow under the race detector, and the caps hold on the
// uncompressed message either way.
var (
	plainServer = connect.WithCompression("gzip", nil, nil)
	plainClient = connect.WithAcceptCompression("gzip", nil, nil)
)

func serve(t *testing.T, opts ...connect.HandlerOption) string {
	path, h := agentv1connect.NewAgentServiceHandler(echo{}, append(opts, plainServer)...)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestAgentMessagesAreCapped(t *testing.T) {
	capped := serve(t, rpclimit.AgentServer()...)
	uncapped := serve(t)
	limited := func(url string) agentv1connect.AgentServiceClient {
		return agentv1connect.NewAgentServiceClient(http.DefaultClient, url, append(rpclimit.AgentClient(), plainClient)...)
	}
	open := func(url string) agentv1connect.AgentServiceClient {
		return agentv1connect.NewAgentServiceClient(http.DefaultClient, url, plainClient)
	}
	for _, tc := range []struct {
		name   string
		client agentv1connect.AgentServiceClient
		size   int
		want   connect.Code // 0: success
	}{
		{"a 32 MiB file goes through", limited(capped), 32 << 20, 0},
		{"the client will not send past the request cap", limited(capped), rpclimit.AgentRequest + 1, connect.CodeResourceExhausted},
		{"the agent will not read past the request cap", open(capped), rpclimit.AgentRequest + 1, connect.CodeResourceExhausted},
		{"the agent will not send past the answer cap", open(capped), rpclimit.AgentResponse + 1, connect.CodeResourceExhausted},
		{"the client will not read past the answer cap", limited(uncapped), rpclimit.AgentResponse + 1, connect.CodeResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Random, so that no compression could shrink it under a cap.
			content := make([]byte, tc.size)
			var seed [32]byte
			seed[0] = byte(tc.size)
			_, _ = rand.NewChaCha8(seed).Read(content)
			resp, err := tc.client.Files(context.Background(), connect.NewRequest(&agentv1.FilesRequest{Content: content}))
			if tc.want == 0 {
				if err != nil || len(resp.Msg.Content) != tc.size {
					t.Fatalf("want %d bytes back, got err %v", tc.size, err)
				}
				return
			}
			if got := connect.CodeOf(err); got != tc.want {
				t.Fatalf("code %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}
