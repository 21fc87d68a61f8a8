package sitejobs

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// deleteAgent answers DeleteSite with its errors in turn, then deletes.
type deleteAgent struct {
	agentv1connect.AgentServiceClient
	mu    sync.Mutex
	errs  []error
	calls int
}

func (a *deleteAgent) DeleteSite(context.Context, *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DeleteSiteResponse], error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if len(a.errs) > 0 {
		err := a.errs[0]
		a.errs = a.errs[1:]
		return nil, err
	}
	return connect.NewResponse(&agentv1.DeleteSiteResponse{Existed: true}), nil
}

type deleteAgents struct{ a *deleteAgent }

func (d deleteAgents) Agent(string) (agentv1connect.AgentServiceClient, error) { return d.a, nil }

// appliedDeletes records the DeleteSite commands a runner applies.
type appliedDeletes struct {
	mu  sync.Mutex
	ids []string
}

func (a *appliedDeletes) Apply(_ context.Context, c fsm.Command) (any, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d, ok := c.(fsm.DeleteSite); ok {
		a.ids = append(a.ids, d.ID)
	}
	return nil, nil
}

// TestDeleteWaitsForARestartingAgent: a delete that reaches the site's
// node while its agent restarts (unreachable) asks again until the agent
// answers, so the site never stays deleting; a refusal fails it at once.
func TestDeleteWaitsForARestartingAgent(t *testing.T) {
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	tests := []struct {
		name      string
		errs      []error
		wantCalls int
		wantCode  string
	}{
		{"answers at once", nil, 1, ""},
		{"restarting, then answers", []error{unavailable, unavailable}, 3, ""},
		{"refuses", []error{connect.NewError(connect.CodeInvalidArgument, errors.New("bad id"))}, 1, "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := readySite(t)
			if err := store.Update(func(tx *state.Tx) error {
				return tx.UpsertNode(state.Node{ID: "n1", Status: state.NodeReady})
			}); err != nil {
				t.Fatal(err)
			}
			agent := &deleteAgent{errs: tt.errs}
			raft := &appliedDeletes{}
			r := &Runners{Store: store, Agents: deleteAgents{agent}, Raft: raft}
			j, err := jobs.New(jobspec.DeleteSite, "ws_a", "site_1", nil, time.Now().UTC())
			if err != nil {
				t.Fatal(err)
			}
			err = r.delete(context.Background(), &j, func(int) {})
			var f *jobs.Failure
			switch {
			case tt.wantCode == "" && err != nil:
				t.Fatal(err)
			case tt.wantCode != "" && (!errors.As(err, &f) || f.Code != tt.wantCode):
				t.Fatalf("%v, want %s", err, tt.wantCode)
			}
			if agent.calls != tt.wantCalls {
				t.Fatalf("%d calls to the agent, want %d", agent.calls, tt.wantCalls)
			}
			if deleted := len(raft.ids) == 1; deleted != (tt.wantCode == "") {
				t.Fatalf("site deleted from the state: %v (%v)", deleted, raft.ids)
			}
		})
	}
}
