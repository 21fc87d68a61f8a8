package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// clusterView is the operators' view of the Raft cluster: the
// configuration, with each server asked for its own state over the
// cluster port (a follower knows best when it last heard the leader).
type clusterView struct{ s *Server }

// Local is this server's own view of Raft.
func (v clusterView) Local() api.RaftStatus {
	n := v.s.node
	st := api.RaftStatus{ID: n.ID(), State: n.State().String(), Term: n.Term(), AppliedIndex: n.AppliedIndex(), LeaderID: n.LeaderID()}
	if last := n.LastContact(); !last.IsZero() {
		ago := time.Since(last).Seconds()
		st.LastContactSeconds = &ago
	}
	return st
}

// Cluster is every server of the Raft configuration with its own view;
// a server that does not answer within a few seconds has Error set.
func (v clusterView) Cluster(ctx context.Context) api.ClusterStatus {
	n := v.s.node
	out := api.ClusterStatus{NodeID: n.ID(), State: n.State().String(), LeaderID: n.LeaderID(), LeaderAPI: n.LeaderAPI(),
		Term: n.Term(), AppliedIndex: n.AppliedIndex(), Servers: []api.ClusterServer{}, Sealing: v.s.sealing.Local()}
	config, err := n.Configuration()
	if err != nil {
		v.s.log.Warn("read the raft configuration", "err", err)
	}
	out.Servers = make([]api.ClusterServer, len(config))
	var wg sync.WaitGroup
	for i, c := range config {
		sv := api.ClusterServer{ID: c.ID, RaftAddr: c.Address, Voter: c.Voter, Leader: c.ID == out.LeaderID}
		var known *state.Server
		if known, _ = n.Store().Server(c.ID); known != nil {
			sv.APIAddr, sv.ClusterAddr = known.APIAddr, known.ClusterAddr
		}
		out.Servers[i] = sv
		if c.ID == n.ID() {
			local := v.Local()
			out.Servers[i].Status = &local
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := v.ask(ctx, out.Servers[i].ClusterAddr)
			if err == nil && st.ID != c.ID {
				err = fmt.Errorf("answered for %q (is it running this version?)", st.ID)
			}
			if err != nil {
				out.Servers[i].Error = err.Error()
				return
			}
			out.Servers[i].Status = &st
		}()
	}
	wg.Wait()
	return out
}

func (v clusterView) ask(ctx context.Context, clusterURL string) (api.RaftStatus, error) {
	if clusterURL == "" {
		return api.RaftStatus{}, fmt.Errorf("no cluster address recorded")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(clusterURL, "/")+api.RaftStatusPath, nil)
	if err != nil {
		return api.RaftStatus{}, err
	}
	resp, err := v.s.peers.Do(req)
	if err != nil {
		return api.RaftStatus{}, fmt.Errorf("did not answer: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	if err != nil {
		return api.RaftStatus{}, fmt.Errorf("read its status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return api.RaftStatus{}, fmt.Errorf("answered %d (is it running this version?)", resp.StatusCode)
	}
	var st api.RaftStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return api.RaftStatus{}, fmt.Errorf("decode its status: %w", err)
	}
	return st, nil
}
