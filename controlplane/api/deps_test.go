package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAPIKeepsToHTTP: the REST package reaches agents, placement and job
// runners only through the services the server gives it, so nothing it
// imports, even indirectly, is the agent protocol, the scheduler or the
// site job runners. The server, which wires them, must show all three, or
// the listing is not what this test thinks it is.
func TestAPIKeepsToHTTP(t *testing.T) {
	forbidden := []string{
		"github.com/sandboxd/sandboxd/protocol/",
		"github.com/sandboxd/sandboxd/scheduler",
		"github.com/sandboxd/sandboxd/controlplane/sitejobs",
	}
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	matches := func(list []string, prefix string) []string {
		var hit []string
		for _, p := range list {
			if strings.HasPrefix(p, prefix) {
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
