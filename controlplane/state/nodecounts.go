package state

import (
	"fmt"
	"sort"
)

// Watch is a channel closed when what was read with it may have changed,
// with the store's own, closed when a restore replaces the whole state:
// a caller keeps what it read until the watch fires.
type Watch struct{ ch, abandon <-chan struct{} }

// Changed reports whether what was read may have changed since; the zero
// Watch always has, so a cache starts empty.
func (w Watch) Changed() bool {
	if w.ch == nil {
		return true
	}
	// Two one-case selects: each is a cheap non-blocking receive, where
	// one select of both would go through the general select.
	select {
	case <-w.ch:
		return true
	default:
	}
	select {
	case <-w.abandon:
		return true
	default:
		return false
	}
}

// NodesWatch lists every node by id, with a Watch that fires when any
// node is added, changed or removed.
func (s *Store) NodesWatch() ([]*Node, Watch, error) {
	db, abandon := s.current()
	tx := db.Txn(false)
	it, err := tx.Get(tableNodes, "id")
	if err != nil {
		return nil, Watch{}, fmt.Errorf("list nodes: %w", err)
	}
	var out []*Node
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Node))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, Watch{ch: it.WatchCh(), abandon: abandon}, nil
}

// CountSitesOnNodes counts, in one read, the sites placed on each of the
// nodes (what len(SitesOnNode) is, without building the lists), each
// count with a Watch that fires when a site is placed on that node,
// leaves it or changes. A placement over a large fleet recounts only the
// nodes whose watch fired.
func (s *Store) CountSitesOnNodes(ids []string) ([]int, []Watch, error) {
	db, abandon := s.current()
	tx := db.Txn(false)
	counts, watches := make([]int, len(ids)), make([]Watch, len(ids))
	for i, id := range ids {
		it, err := tx.Get(tableSites, "node", id)
		if err != nil {
			return nil, nil, fmt.Errorf("count sites on node %s: %w", id, err)
		}
		n := 0
		for raw := it.Next(); raw != nil; raw = it.Next() {
			n++
		}
		counts[i], watches[i] = n, Watch{ch: it.WatchCh(), abandon: abandon}
	}
	return counts, watches, nil
}
