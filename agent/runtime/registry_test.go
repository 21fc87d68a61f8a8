package runtime_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/runtime"
)

// TestRegistryImageForAPHPVersion points a PHP version at an image in a
// registry (Debian's docker-registry on loopback): the catalogue pulls it
// and a container runs from it.
func TestRegistryImageForAPHPVersion(t *testing.T) {
	socket, dir := agenttest.Containerd(t)
	ctx := context.Background()
	addr := freeAddr(t)
	conf := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(conf, []byte("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: "+filepath.Join(dir, "registry")+
		"\nhttp:\n  addr: "+addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := exec.Command("/usr/bin/docker-registry", "serve", conf)
	if err := reg.Start(); err != nil {
		t.Fatalf("docker-registry (deploy/dev/install-deps.sh installs it): %v", err)
	}
	t.Cleanup(func() { _ = reg.Process.Kill(); _ = reg.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("registry did not listen")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// An operator publishes the 8.2 runtime to the registry...
	publisher := agenttest.Runtime(t, socket)
	local, err := agenttest.Catalog(t).PHP(ctx, publisher, "8.2")
	if err != nil {
		t.Fatal(err)
	}
	remote := addr + "/sandboxd/php:8.2"
	if err := publisher.PushImage(ctx, local, remote); err != nil {
		t.Fatal(err)
	}
	// ...and an agent is pointed at it instead of its image cache (in a
	// namespace of its own, so that the image really is pulled).
	rt := agenttest.FreshRuntime(t, socket)
	cat, err := images.Load(t.TempDir(), map[string]string{"8.2": remote})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := cat.PHP(ctx, rt, "8.2")
	if err != nil || ref != remote {
		t.Fatalf("pull: %q %v", ref, err)
	}
	if err := rt.Run(ctx, runtime.Spec{ID: "pulled", Image: ref, UID: 33, GID: 33, Args: []string{"sleep", "60"}}); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Exec(ctx, "pulled", []string{"php", "-r", "echo PHP_VERSION;"}, nil, 33, 33, nil)
	if err != nil || !strings.HasPrefix(string(res.Stdout), "8.2.") {
		t.Fatalf("php in the pulled image: %v %+v", err, res)
	}
	// A reference the registry does not have is a clear error.
	bad, _ := images.Load(t.TempDir(), map[string]string{"8.3": addr + "/sandboxd/php:8.3"})
	if _, err := bad.PHP(ctx, rt, "8.3"); err == nil || !strings.Contains(err.Error(), "8.3") {
		t.Fatalf("missing tag: %v", err)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
