// Package objstoretest runs a real S3-compatible server (VersityGW over a
// temporary directory) for tests. A missing server fails the test (under
// -short it is skipped): CI installs it (deploy/dev/install-deps.sh), so
// it never skips there.
package objstoretest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/objstore"
)

// Version is the VersityGW release the project installs.
const Version = "v1.8.0"

// Binary is where install-deps.sh puts VersityGW (SANDBOXD_VERSITYGW
// overrides it).
func Binary() string {
	if p := os.Getenv("SANDBOXD_VERSITYGW"); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	return filepath.Join(cache, "sandboxd", "versitygw-"+Version, "versitygw")
}

// Start serves S3 on loopback over a temporary directory until the test
// ends, and returns how to reach it (bucket not yet made). Its data
// directory is returned too, so a test can check what the store holds.
func Start(t testing.TB) (objstore.Config, string) {
	t.Helper()
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		hosttest.Missing(t, "VersityGW is not installed at %s (run deploy/dev/install-deps.sh): %v", bin, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := objstore.Config{Endpoint: "http://" + addr, Bucket: "imports-test", AccessKey: "sandboxd-test", SecretKey: "sandboxd-test-secret"}
	cmd := exec.Command(bin, "--port", addr, "posix", dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+cfg.AccessKey, "ROOT_SECRET_KEY="+cfg.SecretKey)
	logf, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start VersityGW: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return cfg, dir
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("VersityGW did not listen on %s: %s", addr, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
