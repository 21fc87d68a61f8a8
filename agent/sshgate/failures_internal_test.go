package sshgate

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/ratelimit"
)

// refuseAll is an Authorizer that refuses every key.
type refuseAll struct{ calls int }

func (r *refuseAll) AuthorizeSSH(context.Context, string, ssh.PublicKey, net.Addr) (*Target, error) {
	r.calls++
	return nil, errors.New("no")
}

// noBackend runs nothing.
type noBackend struct{}

func (noBackend) Exec(context.Context, *Target, Process) (int, error)     { return 0, errors.New("no") }
func (noBackend) SFTP(context.Context, *Target, io.ReadWriteCloser) error { return errors.New("no") }

// meta is the connection metadata of a client at addr.
type meta struct{ addr net.Addr }

func (m meta) User() string          { return "site_alice" }
func (m meta) SessionID() []byte     { return nil }
func (m meta) ClientVersion() []byte { return nil }
func (m meta) ServerVersion() []byte { return nil }
func (m meta) RemoteAddr() net.Addr  { return m.addr }
func (m meta) LocalAddr() net.Addr   { return m.addr }

// TestFailureMemoryIsBounded: failed logins from ever new addresses
// (IPv4 hosts, IPv6 /64s) are remembered for at most MaxFailureAddrs
// addresses, and addresses inside one IPv6 /64 share one budget.
func TestFailureMemoryIsBounded(t *testing.T) {
	auth := &refuseAll{}
	g, err := New(Config{Addr: "127.0.0.1:0", HostKeyPath: filepath.Join(t.TempDir(), "key"), Auth: auth, Backend: noBackend{},
		MaxFailureAddrs: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5000 {
		ip := net.IPv4(10, byte(i>>16), byte(i>>8), byte(i))
		if i%2 == 1 {
			ip = net.ParseIP(fmt.Sprintf("2001:db8:%x::1", i))
		}
		if _, err := g.authorize(meta{&net.TCPAddr{IP: ip, Port: 40000}}, key); err == nil {
			t.Fatal("a refused key was let in")
		}
	}
	if n := g.failures.Len(); n > 100 {
		t.Fatalf("failures of %d addresses remembered, the bound is 100", n)
	}
	// One /64: many addresses, one budget.
	before := auth.calls
	for i := range 200 {
		ip := net.ParseIP(fmt.Sprintf("2001:db8:ffff:1::%x", i+1))
		_, _ = g.authorize(meta{&net.TCPAddr{IP: ip, Port: 40000}}, key)
	}
	if asked := auth.calls - before; asked > DefaultConfig().AuthFailures.Burst+1 {
		t.Fatalf("200 refusals inside one /64 asked the authorizer %d times", asked)
	}
}

// blockingRefuser refuses every key, each ask waiting for release.
type blockingRefuser struct {
	entered atomic.Int32
	release chan struct{}
}

func (b *blockingRefuser) AuthorizeSSH(context.Context, string, ssh.PublicKey, net.Addr) (*Target, error) {
	b.entered.Add(1)
	<-b.release
	return nil, errors.New("no")
}

// TestFailuresInFlightAreCounted: keys offered at once from one address
// (its connections in parallel, each asking the control plane while the
// others do) are asked about no more often than the address's failure
// budget: an ask counts from when it starts, and only a key that is let
// in gives it back.
func TestFailuresInFlightAreCounted(t *testing.T) {
	auth := &blockingRefuser{release: make(chan struct{})}
	g, err := New(Config{Addr: "127.0.0.1:0", HostKeyPath: filepath.Join(t.TempDir(), "key"), Auth: auth, Backend: noBackend{},
		AuthFailures: ratelimit.PerMinute(3)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	const parallel = 16 // DefaultConfig().MaxConnsPerAddr
	var early atomic.Int32
	var wg sync.WaitGroup
	for i := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000 + i}
			if _, err := g.authorize(meta{addr}, key); err == nil {
				t.Error("a refused key was let in")
			}
			early.Add(1)
		}()
	}
	// Every attempt has either been refused without an ask or is asking.
	deadline := time.Now().Add(10 * time.Second)
	for int(auth.entered.Load()+early.Load()) < parallel && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	asked := auth.entered.Load()
	close(auth.release)
	wg.Wait()
	if asked > 3 {
		t.Fatalf("%d keys offered at once from one address were all asked about (%d asks), the budget is 3", parallel, asked)
	}
}
