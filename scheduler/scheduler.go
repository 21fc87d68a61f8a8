// Package scheduler places a sandbox on a node. It is pure: given the nodes
// (what they have and what they run) and one request, it filters the nodes
// that can take it (feasibility), scores the rest (spread or bin-pack) and
// picks the best. No I/O, no clock, no Raft; the leader feeds it a view of
// its node registry and commits the result.
package scheduler

import (
	"fmt"
	"sort"
	"strings"
)

// Resources are the amounts the scheduler accounts for. Zero capacity in a
// dimension means the node does not limit it.
type Resources struct {
	MemoryMB int64 `json:"memoryMb"`
	CPUMilli int64 `json:"cpuMilli"`
	Sites    int   `json:"sites"`
}

func (r Resources) add(o Resources) Resources {
	return Resources{MemoryMB: r.MemoryMB + o.MemoryMB, CPUMilli: r.CPUMilli + o.CPUMilli, Sites: r.Sites + o.Sites}
}

// Node is a node agent as the scheduler sees it.
type Node struct {
	ID string
	// Ready is false for nodes that missed heartbeats or are draining.
	Ready bool
	// Images lists the PHP versions whose runtime image the node holds.
	Images []string
	// Labels are operator-set key/values a request can require.
	Labels   map[string]string
	Capacity Resources
	// Used is what placed sites already claim.
	Used Resources
}

// Request is one sandbox to place.
type Request struct {
	PHPVersion string
	// Needs is what one site claims (Sites is taken as 1 when zero).
	Needs Resources
	// Constraints are labels the node must carry with these values.
	Constraints map[string]string
}

// Strategy chooses among feasible nodes.
type Strategy int

const (
	// Spread prefers the emptiest node: fewer noisy neighbours, and a lost
	// node takes fewer sites with it.
	Spread Strategy = iota
	// BinPack prefers the fullest node that still fits: denser hosts and
	// whole nodes left free for draining or scale-down.
	BinPack
)

// ParseStrategy reads "spread" or "binpack".
func ParseStrategy(s string) (Strategy, error) {
	switch strings.ToLower(s) {
	case "spread", "":
		return Spread, nil
	case "binpack", "bin-pack":
		return BinPack, nil
	}
	return 0, fmt.Errorf("scheduler: unknown strategy %q (use spread or binpack)", s)
}

func (s Strategy) String() string {
	if s == BinPack {
		return "binpack"
	}
	return "spread"
}

// Placement is the chosen node.
type Placement struct {
	NodeID string
	Score  float64
}

// Reasons a node is filtered out; NoFitError counts them.
const (
	ReasonNotReady   = "node not ready"
	ReasonNoImage    = "no image for the PHP version"
	ReasonConstraint = "labels do not match"
	ReasonNoMemory   = "not enough memory"
	ReasonNoCPU      = "not enough CPU"
	ReasonSitesFull  = "site slots full"
)

// NoFitError says why no node could take the request: how many nodes
// failed each check, so an operator sees "3 nodes: no image for PHP 8.1".
type NoFitError struct {
	Nodes   int
	Reasons map[string]int
}

func (e *NoFitError) Error() string {
	if e.Nodes == 0 {
		return "no nodes are registered"
	}
	keys := make([]string, 0, len(e.Reasons))
	for k := range e.Reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d: %s", e.Reasons[k], k))
	}
	return fmt.Sprintf("no node of %d can take the site (%s)", e.Nodes, strings.Join(parts, "; "))
}

// OnlyReason reports whether every node failed for this one reason, so a
// caller can turn "no image anywhere" into a specific client error.
func (e *NoFitError) OnlyReason(reason string) bool {
	return e.Nodes > 0 && len(e.Reasons) == 1 && e.Reasons[reason] == e.Nodes
}

// Feasible returns "" when n can take r, else the reason it cannot.
func Feasible(n *Node, r *Request) string {
	if !n.Ready {
		return ReasonNotReady
	}
	if !hasImage(n.Images, r.PHPVersion) {
		return ReasonNoImage
	}
	for k, v := range r.Constraints {
		if n.Labels[k] != v {
			return ReasonConstraint
		}
	}
	after := n.Used.add(needs(r))
	switch {
	case n.Capacity.MemoryMB > 0 && after.MemoryMB > n.Capacity.MemoryMB:
		return ReasonNoMemory
	case n.Capacity.CPUMilli > 0 && after.CPUMilli > n.Capacity.CPUMilli:
		return ReasonNoCPU
	case n.Capacity.Sites > 0 && after.Sites > n.Capacity.Sites:
		return ReasonSitesFull
	}
	return ""
}

func hasImage(images []string, v string) bool {
	for _, i := range images {
		if i == v {
			return true
		}
	}
	return false
}

func needs(r *Request) Resources {
	n := r.Needs
	if n.Sites == 0 {
		n.Sites = 1
	}
	return n
}

// Score rates a feasible node in [0, 1]; higher is better for the strategy.
// It averages the node's utilisation after placement over the dimensions
// the node limits: spread wants it low, bin-pack high.
func Score(n *Node, r *Request, s Strategy) float64 {
	after := n.Used.add(needs(r))
	var sum float64
	var dims int
	frac := func(used, capacity int64) {
		if capacity > 0 {
			sum += float64(used) / float64(capacity)
			dims++
		}
	}
	frac(after.MemoryMB, n.Capacity.MemoryMB)
	frac(after.CPUMilli, n.Capacity.CPUMilli)
	frac(int64(after.Sites), int64(n.Capacity.Sites))
	// A node that limits nothing is as loaded as the sites it holds: so
	// spread still spreads, and bin-pack still packs, across such nodes.
	util := 1 - 1/float64(1+after.Sites)
	if dims > 0 {
		util = sum / float64(dims)
	}
	if s == BinPack {
		return util
	}
	return 1 - util
}

// Place picks the best feasible node. Ties go to the smallest node id, so
// the same inputs always give the same placement.
func Place(nodes []Node, r Request, s Strategy) (Placement, error) {
	best := Placement{Score: -1}
	var nofit *NoFitError
	for i := range nodes {
		n := &nodes[i]
		if reason := Feasible(n, &r); reason != "" {
			if nofit == nil {
				nofit = &NoFitError{Reasons: map[string]int{}}
			}
			nofit.Reasons[reason]++
			continue
		}
		sc := Score(n, &r, s)
		if sc > best.Score || (sc == best.Score && n.ID < best.NodeID) {
			best = Placement{NodeID: n.ID, Score: sc}
		}
	}
	if best.NodeID == "" {
		if nofit == nil {
			nofit = &NoFitError{Reasons: map[string]int{}}
		}
		nofit.Nodes = len(nodes)
		return Placement{}, nofit
	}
	return best, nil
}
