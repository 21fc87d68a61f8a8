package sitestest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Watch returns a context for a test's calls into a site that ends after
// d, when the test has hung: before it ends, the test fails with where
// each of the module's goroutines waits, one line each, so a hang seen
// once (in CI) says where it was rather than timing the binary out.
func Watch(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(d, func() {
		for i, l := range Stacks() {
			if i == 12 {
				break
			}
			t.Errorf("hung %v: %s", d, l)
		}
		cancel()
	})
	t.Cleanup(func() {
		timer.Stop()
		cancel()
	})
	return ctx
}

// Stacks is every goroutine that runs this module's code, as one line:
// its state, then its frames from the innermost, the module's by short
// name and the first other one in full.
func Stacks() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	const mod = "github.com/sandboxd/sandboxd/"
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		if len(lines) < 2 || !strings.Contains(g, mod) || strings.Contains(g, "sitestest.Stacks") {
			continue
		}
		head := strings.TrimSuffix(strings.TrimPrefix(lines[0], "goroutine "), ":")
		var frames []string
		for i := 1; i < len(lines); i += 2 {
			fn := lines[i]
			if strings.HasPrefix(fn, "created by ") {
				break
			}
			if j := strings.LastIndex(fn, "("); j > 0 {
				fn = fn[:j]
			}
			switch {
			case strings.HasPrefix(fn, mod):
				frames = append(frames, strings.TrimPrefix(fn, mod))
			case len(frames) == 0:
				frames = append(frames, fn)
			}
		}
		out = append(out, fmt.Sprintf("%s: %s", head, strings.Join(frames, " < ")))
	}
	return out
}
