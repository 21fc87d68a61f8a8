package rpcauth

import "testing"

func TestArticle(t *testing.T) {
	for role, want := range map[string]string{"agent": "an agent", "edge": "an edge", "server": "a server", "operator": "an operator"} {
		if got := article(role); got != want {
			t.Errorf("article(%q) = %q, want %q", role, got, want)
		}
	}
}
