// Command raftbench measures the control plane's write path on this
// machine, in one run: Raft applies/s on a 3-node loopback cluster with 1
// and with 64 concurrent writers, and raw bbolt Update/s on the same disk
// as the baseline. It prints the figures and their ratios.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sandboxd/sandboxd/controlplane/cluster"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
)

func main() {
	dir := flag.String("dir", "", "directory on the disk to measure (default: a temp dir)")
	dur := flag.Duration("duration", 3*time.Second, "how long each measurement runs")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the 64-writer run to this file")
	flag.Parse()
	profile = *cpuprofile
	if err := run(*dir, *dur); err != nil {
		fmt.Fprintln(os.Stderr, "raftbench:", err)
		os.Exit(1)
	}
}

var profile string

func run(dir string, dur time.Duration) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "raftbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	bolt1, err := boltUpdates(filepath.Join(dir, "bolt.db"), dur)
	if err != nil {
		return fmt.Errorf("bolt baseline: %w", err)
	}
	nodes, err := startCluster(filepath.Join(dir, "raft"), 3, false)
	if err != nil {
		return err
	}
	defer shutdown(nodes)
	leader := nodes[0]
	w1, err := applies(leader, 1, dur)
	if err != nil {
		return err
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	w64, err := applies(leader, 64, dur)
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	shutdown(nodes)
	// The same cluster without fsync shows the CPU ceiling of this machine.
	free, err := startCluster(filepath.Join(dir, "raft-nosync"), 3, true)
	if err != nil {
		return err
	}
	defer shutdown(free)
	ceiling, err := applies(free[0], 64, dur)
	if err != nil {
		return err
	}
	fmt.Printf("raftbench: %s per measurement, 3-node loopback cluster, fsync on\n", dur)
	fmt.Printf("  raw bbolt Update/s (1 writer, same disk):  %10.0f\n", bolt1)
	fmt.Printf("  raft applies/s, 1 writer:                 %10.0f\n", w1)
	fmt.Printf("  raft applies/s, 64 writers:               %10.0f\n", w64)
	fmt.Printf("  raft applies/s, 64 writers, no fsync:     %10.0f  (CPU ceiling, for context)\n", ceiling)
	fmt.Printf("  ratio 64 writers / 1 writer:              %10.2fx  (goal >= 20x)\n", w64/w1)
	fmt.Printf("  ratio 3-node 64 writers / raw bbolt:      %10.2fx  (goal >= 0.4x)\n", w64/bolt1)
	return nil
}

// boltUpdates is the baseline: one small put per fsynced transaction.
func shutdown(nodes []*cluster.Node) {
	for _, n := range nodes {
		_ = n.Shutdown()
	}
}

func boltUpdates(path string, dur time.Duration) (float64, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n uint64
	start := time.Now()
	for time.Since(start) < dur {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("k"))
			if err != nil {
				return err
			}
			key := binary.BigEndian.AppendUint64(nil, n)
			return b.Put(key, make([]byte, 200))
		})
		if err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startCluster(dir string, n int, noSync bool) ([]*cluster.Node, error) {
	log := slog.New(slog.DiscardHandler)
	var nodes []*cluster.Node
	for i := 0; i < n; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		node, err := cluster.New(cluster.Config{
			NodeID: fmt.Sprintf("n%d", i), DataDir: filepath.Join(dir, fmt.Sprint(i)), RaftAddr: addr,
			Bootstrap: i == 0, Logger: log, FastTimeoutsForTests: true, NoSyncForTests: noSync,
		}, state.NewStore())
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !nodes[0].IsLeader() {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, node := range nodes[1:] {
		sv := state.Server{ID: fmt.Sprintf("n%d", i+1), RaftAddr: string(nodeAddr(node)), APIAddr: "-"}
		if err := nodes[0].AddVoter(ctx, sv); err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

func nodeAddr(n *cluster.Node) string { return n.RaftAddr() }

// applies runs w writers against the leader for dur and returns applies/s.
func applies(leader *cluster.Node, w int, dur time.Duration) (float64, error) {
	var n atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	now := time.Now().UTC()
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < w; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				j := state.Job{ID: ids.New(ids.Job), Type: "bench", WorkspaceID: "ws_bench", CreatedAt: now, UpdatedAt: now}
				if _, err := leader.Apply(context.Background(), fsm.CreateJob{Job: j}); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}
