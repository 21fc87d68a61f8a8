package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestInvitationEmailThroughSMTP sends an invitation through a real SMTP
// server (Debian's python3-aiosmtpd, writing a maildir) and reads the
// delivered message.
// startSMTP runs aiosmtpd on a free port, delivering to a maildir.
func startSMTP(t *testing.T) (addr, maildir string) {
	maildir = filepath.Join(t.TempDir(), "mail")
	addr = freeAddr(t)
	smtpd := exec.Command("/usr/bin/python3", "-m", "aiosmtpd", "-n", "-l", addr,
		"-c", "aiosmtpd.handlers.Mailbox", maildir)
	if err := smtpd.Start(); err != nil {
		t.Fatalf("start aiosmtpd (deploy/dev/install-deps.sh installs python3-aiosmtpd): %v", err)
	}
	t.Cleanup(func() { _ = smtpd.Process.Kill(); _ = smtpd.Wait() })
	// It may still be starting: callers use it once it listens.
	st.WaitFor(t, 30*time.Second, "aiosmtpd to listen", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr, maildir
}

func TestInvitationEmailThroughSMTP(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	smtpAddr, maildir := startSMTP(t)

	dir := devDataDir(t)
	dev := start(t, nil, append([]string{"dev", "--data-dir", dir, "--api-addr", freeAddr(t), "--edge-addr", freeAddr(t),
		"--smtp-addr", smtpAddr, "--smtp-from", "sandboxd@example.test"}, sharedContainerd(t)...)...)
	url := dev.waitLine(t, "SANDBOX_URL=")
	owner := st.NewClient(t, url, dev.waitLine(t, "SANDBOX_TOKEN="))
	ws := owner.Do("GET", "/api/account/me", nil).Must(t, 200).Str("user.personalWorkspaceId")

	inv := owner.Do("POST", "/api/app/workspaces/"+ws+"/members", map[string]string{"email": "new.hire@example.com"}).
		Must(t, 201).Str("invitation.id")

	var msg string
	st.WaitFor(t, 30*time.Second, "the invitation in the maildir", func() bool {
		files, _ := filepath.Glob(filepath.Join(maildir, "new", "*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if strings.Contains(string(b), inv) {
				msg = string(b)
				return true
			}
		}
		return false
	})
	for _, want := range []string{"To: new.hire@example.com", "From: sandboxd@example.test", "Subject: Invitation to Personal", "/api/account/invitations/" + inv + "/accept"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	// With SMTP configured, nothing goes to the outbox.
	out, err := run(t, nil, "admin", "outbox", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "the outbox is empty") {
		t.Fatalf("outbox: %v %s", err, out)
	}
}
