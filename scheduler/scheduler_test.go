package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

func node(id string, usedSites int, images ...string) Node {
	return Node{ID: id, Ready: true, Images: images,
		Capacity: Resources{MemoryMB: 4096, CPUMilli: 4000, Sites: 10},
		Used:     Resources{MemoryMB: int64(usedSites) * 256, CPUMilli: int64(usedSites) * 250, Sites: usedSites}}
}

func TestPlace(t *testing.T) {
	req := Request{PHPVersion: "8.2", Needs: Resources{MemoryMB: 256, CPUMilli: 250}}
	cases := []struct {
		name     string
		nodes    []Node
		req      Request
		strategy Strategy
		want     string
		reason   string
	}{
		{"spread picks the emptiest", []Node{node("a", 5, "8.2"), node("b", 1, "8.2"), node("c", 3, "8.2")}, req, Spread, "b", ""},
		{"binpack picks the fullest that fits", []Node{node("a", 5, "8.2"), node("b", 1, "8.2"), node("c", 9, "8.2")}, req, BinPack, "c", ""},
		{"binpack skips a full node", []Node{node("a", 5, "8.2"), node("c", 10, "8.2")}, req, BinPack, "a", ""},
		{"ties go to the smallest id", []Node{node("b", 2, "8.2"), node("a", 2, "8.2")}, req, Spread, "a", ""},
		{"image required", []Node{node("a", 0, "7.4"), node("b", 8, "8.2", "7.4")}, req, Spread, "b", ""},
		{"no image anywhere", []Node{node("a", 0, "7.4"), node("b", 0, "8.4")}, req, Spread, "", ReasonNoImage},
		{"not ready", []Node{{ID: "a", Images: []string{"8.2"}}}, req, Spread, "", ReasonNotReady},
		{"memory", []Node{{ID: "a", Ready: true, Images: []string{"8.2"}, Capacity: Resources{MemoryMB: 100}}}, req, Spread, "", ReasonNoMemory},
		{"cpu", []Node{{ID: "a", Ready: true, Images: []string{"8.2"}, Capacity: Resources{CPUMilli: 100}}}, req, Spread, "", ReasonNoCPU},
		{"unlimited node fits", []Node{{ID: "a", Ready: true, Images: []string{"8.2"}}}, req, BinPack, "a", ""},
		{"spread across unlimited nodes", []Node{
			{ID: "a", Ready: true, Images: []string{"8.2"}, Used: Resources{Sites: 3}},
			{ID: "b", Ready: true, Images: []string{"8.2"}, Used: Resources{Sites: 1}},
		}, req, Spread, "b", ""},
		{"binpack onto the fuller unlimited node", []Node{
			{ID: "a", Ready: true, Images: []string{"8.2"}, Used: Resources{Sites: 3}},
			{ID: "b", Ready: true, Images: []string{"8.2"}, Used: Resources{Sites: 1}},
		}, req, BinPack, "a", ""},
		{"constraints", []Node{
			{ID: "a", Ready: true, Images: []string{"8.2"}, Labels: map[string]string{"zone": "x"}},
			{ID: "b", Ready: true, Images: []string{"8.2"}, Labels: map[string]string{"zone": "y"}},
		}, Request{PHPVersion: "8.2", Constraints: map[string]string{"zone": "y"}}, Spread, "b", ""},
		{"no nodes", nil, req, Spread, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Place(tc.nodes, tc.req, tc.strategy)
			if tc.want != "" {
				if err != nil || p.NodeID != tc.want {
					t.Fatalf("got %+v %v, want %s", p, err, tc.want)
				}
				return
			}
			var nf *NoFitError
			if !errors.As(err, &nf) {
				t.Fatalf("want NoFitError, got %+v %v", p, err)
			}
			if tc.reason != "" && !nf.OnlyReason(tc.reason) {
				t.Fatalf("reasons %v, want only %q", nf.Reasons, tc.reason)
			}
			if nf.Error() == "" {
				t.Fatal("empty message")
			}
		})
	}
}

func TestParseStrategy(t *testing.T) {
	for in, want := range map[string]Strategy{"": Spread, "spread": Spread, "BinPack": BinPack, "bin-pack": BinPack} {
		if got, err := ParseStrategy(in); err != nil || got != want {
			t.Fatalf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParseStrategy("random"); err == nil {
		t.Fatal("unknown strategy accepted")
	}
}

// fleet builds n nodes with varied load and images, the same every run.
func fleet(n int) []Node {
	rng := rand.New(rand.NewPCG(1, 2))
	versions := [][]string{{"8.2"}, {"8.2", "7.4"}, {"8.4", "8.2"}, {"7.4"}}
	nodes := make([]Node, n)
	for i := range nodes {
		used := rng.IntN(60)
		nodes[i] = Node{ID: fmt.Sprintf("node-%04d", i), Ready: rng.IntN(50) != 0, Images: versions[rng.IntN(len(versions))],
			Labels:   map[string]string{"zone": fmt.Sprint("z", i%3)},
			Capacity: Resources{MemoryMB: 24576, CPUMilli: 8000, Sites: 64},
			Used:     Resources{MemoryMB: int64(used) * 300, CPUMilli: int64(used) * 100, Sites: used}}
	}
	return nodes
}

// scanOnly is the baseline the benchmark compares with: the feasibility
// check of every node without scoring, the least any placement that
// considers the whole fleet must do.
func scanOnly(nodes []Node, r Request) string {
	var last string
	for i := range nodes {
		if Feasible(&nodes[i], &r) == "" {
			last = nodes[i].ID
		}
	}
	return last
}

var sink string

func BenchmarkPlace1000(b *testing.B) {
	nodes := fleet(1000)
	req := Request{PHPVersion: "8.2", Needs: Resources{MemoryMB: 300, CPUMilli: 100}}
	b.Run("baseline-scan", func(b *testing.B) {
		for b.Loop() {
			sink = scanOnly(nodes, req)
		}
	})
	for _, s := range []Strategy{Spread, BinPack} {
		b.Run(s.String(), func(b *testing.B) {
			for b.Loop() {
				p, err := Place(nodes, req, s)
				if err != nil {
					b.Fatal(err)
				}
				sink = p.NodeID
			}
		})
	}
}
