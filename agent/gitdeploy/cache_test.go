package gitdeploy_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/gittest"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/gitdeploy"
)

// TestFetchConcurrency: fetches of one repository wait for each other
// (all succeed on the same cache); a fetch of another repository runs
// while one is held up at the server.
func TestFetchConcurrency(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	a := gittest.NewRepo(t, srv.Root, "a", map[string]string{"a.php": "<?php // a\n"})
	gittest.NewRepo(t, srv.Root, "b", map[string]string{"b.php": "<?php // b\n"})
	f := &gitdeploy.Fetcher{Dir: t.TempDir(), CAFile: srv.CAFile}
	ctx := context.Background()
	head := gittest.Git(t, a.Bare, "rev-parse", "main")

	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			tree, err := f.Fetch(ctx, gitdeploy.Source{RepoID: "rep_a", URL: srv.URL("127.0.0.1", "a"), Branch: "main"})
			if err == nil && tree.SHA != head {
				err = fmt.Errorf("sha %s", tree.SHA)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	// a's fetch is held at the server until b's request arrives: b must
	// not wait for a.
	bArrived := make(chan struct{})
	var once sync.Once
	srv.SetHook(func(r *http.Request) {
		switch {
		case strings.Contains(r.URL.Path, "/b.git/"):
			once.Do(func() { close(bArrived) })
		case strings.Contains(r.URL.Path, "/a.git/"):
			select {
			case <-bArrived:
			case <-time.After(20 * time.Second):
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(ctx, gitdeploy.Source{RepoID: "rep_a", URL: srv.URL("127.0.0.1", "a"), Branch: "main"})
		done <- err
	}()
	if _, err := f.Fetch(ctx, gitdeploy.Source{RepoID: "rep_b", URL: srv.URL("127.0.0.1", "b"), Branch: "main"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-bArrived:
	default:
		t.Fatal("b's fetch reached no server")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestFetchCancel: ending the context kills git (and its remote helper)
// while the server stalls.
func TestFetchCancel(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	gittest.NewRepo(t, srv.Root, "slow", map[string]string{"a.php": "<?php\n"})
	srv.SetHook(func(r *http.Request) { <-r.Context().Done() }) // answers when the client is gone
	f := &gitdeploy.Fetcher{Dir: t.TempDir(), CAFile: srv.CAFile}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := f.Fetch(ctx, gitdeploy.Source{RepoID: "rep_slow", URL: srv.URL("127.0.0.1", "slow"), Branch: "main"})
	if err == nil || time.Since(start) > 15*time.Second {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
	srv.SetHook(nil)
	// The limit's timeout is the same path.
	f.Limits.Timeout = time.Second
	srv.SetHook(func(r *http.Request) { <-r.Context().Done() })
	if _, err := f.Fetch(context.Background(), gitdeploy.Source{RepoID: "rep_slow", URL: srv.URL("127.0.0.1", "slow"), Branch: "main"}); !errors.Is(err, gitdeploy.ErrUnreachable) {
		t.Fatalf("timeout: %v", err)
	}
}

// TestPrune: once a repository's cache passes CacheBytes, a fetch drops
// what the fetched commit does not reach; a Tree of the dropped commit
// then says so.
func TestPrune(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	repo := gittest.NewRepo(t, srv.Root, "p", pluginFiles("1.0"))
	f := &gitdeploy.Fetcher{Dir: t.TempDir(), CAFile: srv.CAFile, Limits: gitdeploy.Limits{CacheBytes: 1}}
	ctx := context.Background()
	src := gitdeploy.Source{RepoID: "rep_p", URL: srv.URL("127.0.0.1", "p"), Branch: "main"}
	old, err := f.Fetch(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	repo.Commit("v2", pluginFiles("2.0"))
	repo.Push("main")
	s := src
	s.Branch = "other"
	repo.Push("other")
	if _, err := f.Fetch(ctx, s); err != nil {
		t.Fatal(err)
	}
	newTree, err := f.Fetch(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(f.Dir, "rep_p", "repo.git")
	if err := exec.Command(gittest.RealGit(t), "-C", cache, "cat-file", "-e", old.SHA).Run(); err == nil {
		t.Fatal("the old commit is still in the cache")
	}
	if refs := gittest.Git(t, cache, "for-each-ref", "--format=%(refname)"); refs != "refs/heads/main" {
		t.Fatalf("refs left: %q", refs)
	}
	if err := old.WriteTar(ctx, io.Discard, ""); !errors.Is(err, gitdeploy.ErrGone) {
		t.Fatalf("stale tree: %v", err)
	}
	if err := newTree.WriteTar(ctx, io.Discard, "p"); err != nil {
		t.Fatal(err)
	}
}

// failingWriter takes n bytes, then fails.
type failingWriter struct{ n int }

var errWriter = errors.New("the reader went away")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errWriter
	}
	w.n -= len(p)
	return len(p), nil
}

// TestWriteTarStops: a writer that fails, or a context that ends, stops
// WriteTar with that reason (git cat-file is reaped), and a bad folder
// name is refused.
func TestWriteTarStops(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	gittest.NewRepo(t, srv.Root, "w", pluginFiles("1.0"))
	f := &gitdeploy.Fetcher{Dir: t.TempDir(), CAFile: srv.CAFile}
	ctx := context.Background()
	tree, err := f.Fetch(ctx, gitdeploy.Source{RepoID: "rep_w", URL: srv.URL("127.0.0.1", "w"), Branch: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.WriteTar(ctx, &failingWriter{n: 4096}, "w"); !errors.Is(err, errWriter) {
		t.Fatalf("failing writer: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := tree.WriteTar(cctx, io.Discard, "w"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	for _, prefix := range []string{"..", "a/b", ".hidden", "-x", strings.Repeat("x", 101)} {
		if err := tree.WriteTar(ctx, io.Discard, prefix); !errors.Is(err, gitdeploy.ErrInvalid) {
			t.Errorf("prefix %q: %v", prefix, err)
		}
	}
	// The repository's lock was given back each time: a fetch goes on.
	if _, err := f.Fetch(ctx, gitdeploy.Source{RepoID: "rep_w", URL: srv.URL("127.0.0.1", "w"), Branch: "main"}); err != nil {
		t.Fatal(err)
	}
}
