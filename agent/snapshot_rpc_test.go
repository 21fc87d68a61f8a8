package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/agent/sitenet"
	"github.com/sandboxd/sandboxd/agent/sites"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

type noNetwork struct{}

func (noNetwork) Attach(context.Context, string, netip.Addr) (sitenet.Attachment, error) {
	return sitenet.Attachment{}, errors.New("no network")
}
func (noNetwork) Detach(context.Context, string) error { return nil }

type noUIDs struct{}

func (noUIDs) Claim(string) (int, error) { return 0, errors.New("no uids") }
func (noUIDs) Release(string) error      { return nil }

// TestSnapshotSiteErrors: a snapshot the agent cannot take ends the
// stream with a Connect code the control plane can act on, and no part.
func TestSnapshotSiteErrors(t *testing.T) {
	mgr, err := sites.New(sites.Config{Dir: t.TempDir(), Network: noNetwork{}, UIDs: noUIDs{}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(&service{sites: mgr, log: slog.New(slog.DiscardHandler)}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := agentv1connect.NewAgentServiceClient(srv.Client(), srv.URL)
	for _, tc := range []struct {
		name string
		req  *agentv1.SnapshotSiteRequest
		code connect.Code
	}{
		{"unknown site", &agentv1.SnapshotSiteRequest{SiteId: "site_none0000", JobId: "job_1"}, connect.CodeNotFound},
		{"negative bound", &agentv1.SnapshotSiteRequest{SiteId: "site_none0000", MaxBytes: -1}, connect.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := client.SnapshotSite(context.Background(), connect.NewRequest(tc.req))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			for stream.Receive() {
				t.Fatalf("a message: %v", stream.Msg())
			}
			if got := connect.CodeOf(stream.Err()); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, stream.Err(), tc.code)
			}
		})
	}
}
