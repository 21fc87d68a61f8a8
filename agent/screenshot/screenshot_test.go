package screenshot

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestShots takes real Chromium shots of a site served by a local
// backend: the picture shows the page (its colour where the page put
// it), at the size asked, the whole page when asked; the page's requests
// for other hosts (a listener on the host, by name and by address) never
// leave the shot's proxy; a page that never finishes loading is taken at
// the bound; bad paths are refused; and the browser, once closed, leaves
// no process behind.
func TestShots(t *testing.T) {
	hosttest.Root(t)
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Fatal("chromium is not installed (deploy/dev/install-deps.sh installs it)")
	}
	var other atomic.Int32
	host, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			other.Add(1)
			c.Close()
		}
	}()
	hostPort := host.Addr().(*net.TCPAddr).Port
	var hosts atomic.Value
	hosts.Store("")
	block := make(chan struct{})
	defer close(block)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		hosts.Store(r.Host)
		fmt.Fprintf(w, `<html><body style="margin:0;background:#ff0000">
			<div style="height:3000px"></div>
			<img src="http://127.0.0.1:%d/leak.png"><img src="http://example.com/x.png"><img src="http://other.localhost:8081/x.png">
			<script>fetch("http://127.0.0.1:%d/js").catch(() => {}); new WebSocket("ws://127.0.0.1:%d/ws");</script>
			</body></html>`, hostPort, hostPort, hostPort)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><body style="background:#0000ff"><img src="/never">`)
		w.(http.Flusher).Flush()
	})
	mux.HandleFunc("/never", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	backend := &http.Server{Handler: mux}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go backend.Serve(bl)
	defer backend.Close()

	dir := t.TempDir()
	s, err := New(Config{Dir: dir, UID: 65534, Idle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	site := "http://shot.localhost:8081"
	req := Request{SiteURL: site, Backend: bl.Addr().String(), Path: "/", Width: 800, Height: 600}
	ctx := context.Background()

	t0 := time.Now()
	shot, err := s.Take(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first shot (browser start included): %s", time.Since(t0))
	img, err := png.Decode(bytes.NewReader(shot.PNG))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 600 || !shot.Loaded {
		t.Fatalf("shot %dx%d, loaded %v; want 800x600 loaded", b.Dx(), b.Dy(), shot.Loaded)
	}
	if r, g, b, _ := img.At(400, 300).RGBA(); r>>8 < 200 || g>>8 > 50 || b>>8 > 50 {
		t.Fatalf("the page's red is (%d,%d,%d)", r>>8, g>>8, b>>8)
	}
	if got := hosts.Load(); got != "shot.localhost:8081" {
		t.Fatalf("the backend saw Host %q", got)
	}
	if kept, err := s.Get(shot.ID); err != nil || !bytes.Equal(kept, shot.PNG) {
		t.Fatalf("the kept shot: %v", err)
	}
	if _, err := s.Get("../../etc/passwd"); err != ErrNotFound {
		t.Fatalf("a bad id: %v", err)
	}

	t0 = time.Now()
	full, err := s.Take(ctx, Request{SiteURL: site, Backend: bl.Addr().String(), Path: "/", Width: 800, Height: 600, FullPage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a full-page shot with the browser up: %s", time.Since(t0))
	if img, err := png.Decode(bytes.NewReader(full.PNG)); err != nil || img.Bounds().Dy() < 3000 || img.Bounds().Dx() != 800 {
		t.Fatalf("full page: %v %v", img.Bounds(), err)
	}

	slow, err := s.Take(ctx, Request{SiteURL: site, Backend: bl.Addr().String(), Path: "/slow", Width: 640, Height: 480})
	if err != nil {
		t.Fatal(err)
	}
	if slow.Loaded {
		t.Fatal("a page that never finished loading says it loaded")
	}
	if img, err := png.Decode(bytes.NewReader(slow.PNG)); err != nil {
		t.Fatal(err)
	} else if _, _, b, _ := img.At(10, 10).RGBA(); b>>8 < 200 {
		t.Fatal("the page that never finished loading is not in its shot")
	}

	for _, p := range []string{"", "x", "//evil.example/", "/a\r\nb"} {
		if _, err := s.Take(ctx, Request{SiteURL: site, Backend: bl.Addr().String(), Path: p, Width: 640, Height: 480}); err == nil {
			t.Fatalf("path %q was taken", p)
		}
	}
	if n := other.Load(); n != 0 {
		t.Fatalf("the host's listener took %d connections from pages", n)
	}

	profile := s.profile
	s.Close()
	time.Sleep(500 * time.Millisecond)
	out, _ := exec.Command("pgrep", "-f", profile).Output()
	if strings.TrimSpace(string(out)) != "" {
		t.Fatalf("browser processes left: %s", out)
	}
	if _, err := os.Stat(dir + "/shots/" + shot.ID + ".png"); err != nil {
		t.Fatalf("the shot is not kept: %v", err)
	}
	if _, err := os.Stat(profile); !os.IsNotExist(err) {
		t.Fatalf("the browser's profile is left (%v)", err)
	}
}
