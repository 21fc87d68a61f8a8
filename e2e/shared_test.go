package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/runtime"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// system is the one `sandboxd dev` that every test needing no flag of
// its own shares, each through an account (a workspace) of its own, as
// customers share one service: one start, not one a test. The first test
// that asks starts it; TestMain stops and purges it after the last.
var system struct {
	once     sync.Once
	dev      *devSystem // owner is the dev owner: tests get their own
	operator string
	err      error
	accounts atomic.Int64
}

// sharedDev is the shared dev system as a new account of its own (paid,
// as the dev owner is) sees it.
func sharedDev(t *testing.T) *devSystem {
	t.Helper()
	flags := sharedContainerd(t)
	system.once.Do(func() { system.err = bootShared(flags) })
	if system.err != nil {
		t.Fatalf("the shared dev system: %v", system.err)
	}
	d := *system.dev
	email := fmt.Sprintf("%s-%d@e2e.example.com", accountName(t.Name()), system.accounts.Add(1))
	op := st.NewClient(t, "http://"+d.api, system.operator)
	op.Do("POST", "/api/admin/accounts", map[string]string{"email": email, "plan": "paid"}).Must(t, 201)
	token := op.Do("POST", "/api/admin/tokens", map[string]string{"email": email}).Must(t, 201).Str("secret")
	d.owner, d.email = st.NewClient(t, "http://"+d.api, token), email
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the shared dev system said (last %d lines, access log left out):\n%s", tailLines, d.proc.tail(tailLines))
		}
	})
	return &d
}

var notName = regexp.MustCompile(`[^a-z0-9]+`)

func accountName(test string) string {
	return strings.Trim(notName.ReplaceAllString(strings.ToLower(test), "-"), "-")
}

// bootShared starts the shared system on the shared containerd.
func bootShared(flags []string) error {
	dir, err := os.MkdirTemp("/tmp", "sbx-")
	if err != nil {
		return err
	}
	dir = filepath.Join(dir, "d")
	api, err := freeAddrNoT()
	if err != nil {
		return err
	}
	edge, err := freeAddrNoT()
	if err != nil {
		return err
	}
	args := append([]string{"dev", "--data-dir", dir, "--api-addr", api, "--edge-addr", edge, "--log-format", "json",
		"--ssh-addr", "127.0.0.1:0"}, flags...)
	p, err := spawn(nil, binary, args...)
	if err != nil {
		return err
	}
	system.dev = &devSystem{dir: dir, api: api, edge: edge, proc: p}
	if _, err := p.line("SANDBOX_TOKEN=", 2*time.Minute); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, "operator-token"))
	if err != nil {
		return err
	}
	system.operator = strings.TrimSpace(string(b))
	return nil
}

// stopShared stops and purges the shared system, if a test started it,
// and says what it left on the shared containerd.
func stopShared() error {
	if system.dev == nil {
		return nil
	}
	d := system.dev
	errs := []error{d.proc.terminate()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentDir := filepath.Join(d.dir, "agent")
	errs = append(errs, agent.Purge(ctx, agentDir, ""))
	if rt, err := runtime.ConnectScoped(shared.socket, shared.namespace, agent.ContainerScope(agentDir)); err != nil {
		errs = append(errs, err)
	} else {
		if ids, err := rt.Containers(ctx); err != nil || len(ids) > 0 {
			errs = append(errs, fmt.Errorf("containers left after the purge: %v %v", ids, err))
		}
		rt.Close()
	}
	errs = append(errs, agent.RemoveDataDir(filepath.Dir(d.dir)))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the shared dev system: %w", err)
	}
	return nil
}

// freeAddrNoT is a free loopback address, for what starts outside a test.
func freeAddrNoT() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
