package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAPIKeepsToHTTP: the REST package reaches agents, placement, job
// runners and Raft only through the services the server gives it, so
// nothing it imports, even indirectly, is the agent protocol, the
// scheduler, the site job runners, a Raft command (fsm), the job queue or
// the Raft node: every write is a service's. The server, which wires
// them, must show them all, or the listing is not what this test thinks
// it is.
func TestAPIKeepsToHTTP(t *testing.T) {
	forbidden := []string{
		"github.com/sandboxd/sandboxd/protocol/",
		"github.com/sandboxd/sandboxd/scheduler",
		"github.com/sandboxd/sandboxd/controlplane/sitejobs",
		"github.com/sandboxd/sandboxd/controlplane/fsm$",
		"github.com/sandboxd/sandboxd/controlplane/jobs$",
		"github.com/sandboxd/sandboxd/controlplane/cluster$",
	}
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	// A name ending in $ is one package; any other, a prefix.
	matches := func(list []string, name string) []string {
		var hit []string
		for _, p := range list {
			if exact, ok := strings.CutSuffix(name, "$"); ok && p == exact || !ok && strings.HasPrefix(p, name) {
				hit = append(hit, p)
			}
		}
		return hit
	}
	server := deps("github.com/sandboxd/sandboxd/controlplane/server")
	api := deps("github.com/sandboxd/sandboxd/controlplane/api")
	for _, f := range forbidden {
		if len(matches(server, f)) == 0 {
			t.Errorf("the server does not import %s: the listing is not what this test expects", f)
		}
		if hit := matches(api, f); len(hit) > 0 {
			t.Errorf("controlplane/api imports %v; reach it through a service the server wires in", hit)
		}
	}
}
