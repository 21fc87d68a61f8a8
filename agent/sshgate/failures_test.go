package sshgate_test

import (
	"math"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/agent/sshgate"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestFailedLoginsAreBounded: a client that keeps offering keys no
// account holds is asked about only until its address's failure budget
// (DefaultConfig: 30, refilling 30 a minute) is spent; after that the
// gateway refuses it without asking the control plane, so a flood of
// failed logins costs neither an ask nor a log line each.
func TestFailedLoginsAreBounded(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{})
	f.auth.allow("site_alice", signer(t).PublicKey())
	stranger := signer(t)
	const attempts = 100
	start := time.Now()
	for i := range attempts {
		c, err := ssh.Dial("tcp", f.g.Addr().String(), &ssh.ClientConfig{
			User: "site_alice", Auth: []ssh.AuthMethod{ssh.PublicKeys(stranger)},
			HostKeyCallback: ssh.FixedHostKey(f.g.HostKey()), Timeout: 20 * time.Second,
		})
		if err == nil {
			c.Close()
			t.Fatalf("attempt %d: a stranger's key was let in", i)
		}
	}
	// What refilled while the test ran is allowed on top of the burst.
	allowed := 30 + int(math.Ceil(time.Since(start).Seconds()*30/60)) + 1
	if n := f.auth.callCount(); n > allowed {
		t.Fatalf("%d failed logins from one address asked the authorizer %d times (at most %d allowed)", attempts, n, allowed)
	}
	if f.backend.calls() != 0 {
		t.Fatal("the backend ran for a refused client")
	}
}
