package edge_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// TestCertStorage drives certmagic's Storage contract against the
// control plane's CertStorageService: values round-trip, directories
// list and delete as a whole, leases exclude a second edge until
// released or expired, bad keys are refused, and a private key never
// reaches the Raft log or the data dir in the clear.
func TestCertStorage(t *testing.T) {
	var dataDir string
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { dataDir = c.DataDir }})
	ctx := context.Background()
	a := edge.NewCertStorage(st.Member(t, s, pki.RoleEdge, "edge-a").Client("", pki.RoleServer), s.ClusterURL(), "edge-a")
	b := edge.NewCertStorage(st.Member(t, s, pki.RoleEdge, "edge-b").Client("", pki.RoleServer), s.ClusterURL(), "edge-b")
	b.PollInterval = 20 * time.Millisecond

	secretKey := []byte("-----BEGIN EC PRIVATE KEY-----\nc2VjcmV0LWNhbmFyeS1rZXk=\n-----END EC PRIVATE KEY-----\n")
	files := map[string][]byte{
		"certificates/acme/shop.example.com/shop.example.com.crt": []byte("cert"),
		"certificates/acme/shop.example.com/shop.example.com.key": secretKey,
		"certificates/acme/blog.example.com/blog.example.com.crt": []byte("cert2"),
		"acme/accounts/x.json": []byte("{}"),
	}
	for k, v := range files {
		if err := a.Store(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range files {
		got, err := b.Load(ctx, k)
		if err != nil || string(got) != string(v) {
			t.Fatalf("load %s from the other edge: %q %v", k, got, err)
		}
	}
	if _, err := a.Load(ctx, "certificates/acme/none/none.crt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing key: %v, want fs.ErrNotExist", err)
	}
	if !a.Exists(ctx, "certificates/acme") || !a.Exists(ctx, "acme/accounts/x.json") || a.Exists(ctx, "certificates/acm") {
		t.Fatal("Exists is wrong about files and directories")
	}
	info, err := a.Stat(ctx, "certificates/acme/shop.example.com/shop.example.com.key")
	if err != nil || !info.IsTerminal || info.Size != int64(len(secretKey)) || time.Since(info.Modified) > time.Minute {
		t.Fatalf("stat of a file: %+v %v", info, err)
	}
	if info, err := a.Stat(ctx, "certificates/acme"); err != nil || info.IsTerminal {
		t.Fatalf("stat of a directory: %+v %v", info, err)
	}
	top, err := a.List(ctx, "certificates/acme", false)
	if err != nil || !slices.Equal(top, []string{"certificates/acme/blog.example.com", "certificates/acme/shop.example.com"}) {
		t.Fatalf("list: %v %v", top, err)
	}
	all, err := a.List(ctx, "certificates", true)
	if err != nil || len(all) != 3 {
		t.Fatalf("recursive list: %v %v", all, err)
	}
	if err := a.Delete(ctx, "certificates/acme/shop.example.com"); err != nil {
		t.Fatal(err)
	}
	if a.Exists(ctx, "certificates/acme/shop.example.com/shop.example.com.crt") || !a.Exists(ctx, "certificates/acme/blog.example.com") {
		t.Fatal("deleting a directory removed the wrong keys")
	}
	if err := a.Delete(ctx, "certificates/acme/none"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	for _, bad := range []string{"", "/etc/passwd", "a/../b", "a//b", "a/./b", "ключ", strings.Repeat("k", 600)} {
		if err := a.Store(ctx, bad, []byte("x")); err == nil {
			t.Errorf("key %q was stored", bad)
		}
	}
	if err := a.Store(ctx, "big", make([]byte, 300<<10)); err == nil {
		t.Error("a value over the bound was stored")
	}

	// Leases: B waits while A holds the lock and gets it once released.
	if err := a.Lock(ctx, "issue_cert_shop.example.com"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(ctx, "issue_cert_shop.example.com"); ok || err != nil {
		t.Fatalf("a held lock was taken: %v %v", ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx, "issue_cert_shop.example.com") }()
	select {
	case err := <-got:
		t.Fatalf("Lock returned while another edge held the lease: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := a.RenewLockLease(ctx, "issue_cert_shop.example.com", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx, "issue_cert_shop.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := st.Await(t, (<-chan error)(got), 10*time.Second, "the lock after its release"); err != nil {
		t.Fatal(err)
	}
	if err := a.RenewLockLease(ctx, "issue_cert_shop.example.com", time.Minute); err == nil {
		t.Fatal("an edge renewed a lease another holds")
	}
	// A lease whose holder died runs out.
	a.Lease = time.Second
	if ok, _ := a.TryLock(ctx, "issue_cert_blog.example.com"); !ok {
		t.Fatal("a free lock was refused")
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.Lock(lctx, "issue_cert_blog.example.com"); err != nil {
		t.Fatalf("an expired lease was never given up: %v", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := a.Lock(cctx, "issue_cert_blog.example.com"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a cancelled context: %v", err)
	}

	// The private key is sealed before it enters the log.
	if err := a.Store(ctx, "certificates/acme/canary/canary.key", secretKey); err != nil {
		t.Fatal(err)
	}
	if err := s.Node().Snapshot(); err != nil {
		t.Fatal(err)
	}
	read := 0
	err = filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "tls" {
				return filepath.SkipDir // the server's own key, like any TLS server's
			}
			return nil
		}
		read++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "c2VjcmV0LWNhbmFyeS1rZXk") || strings.Contains(string(b), "PRIVATE KEY") {
			t.Errorf("%s holds the private key in the clear", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if read < 2 {
		t.Fatalf("only %d files in the data dir: the Raft log and snapshot were not there to read", read)
	}
}
