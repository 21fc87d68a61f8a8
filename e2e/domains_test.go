package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/dnstest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/pebbletest"
)

// TestCustomDomainOnARealSite points a hostname at a real WordPress
// sandbox: records that are wrong leave it pending_dns with words that
// say why and order no certificate (Pebble's log shows none); the right
// CNAME moves WordPress to https://<hostname>, the edge gets Pebble's
// certificate on the first handshake and serves WordPress there, plain
// HTTP and the sandbox URL lead to it, a second edge process serves the
// same certificate without ordering again, and a disconnect stops the
// routing and puts WordPress back on its sandbox URL.
func TestCustomDomainOnARealSite(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dns := dnstest.Start(t)
	edgeAddr, edgeTLS := freeAddr(t), freeAddr(t)
	pebble := pebbletest.Start(t, pebbletest.Options{HTTPPort: portNumber(t, edgeAddr), TLSPort: portNumber(t, edgeTLS), DNSServer: dns.Addr})
	dir := devDataDir(t)
	d := startDev(t, dir, freeAddr(t), edgeAddr, "--dns-resolver", dns.Addr, "--edge-tls-addr", edgeTLS,
		"--acme-ca", pebble.Directory, "--acme-ca-root", pebble.ServerRootFile, "--acme-email", "ops@example.com")

	made := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Domain shop"}).Must(t, 202)
	id := made.Str("site.id")
	if job := d.waitJob(t, made.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("create: %v", job)
	}
	sandboxURL := d.owner.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200).Str("site.url")
	sandboxHost := strings.Split(strings.TrimPrefix(sandboxURL, "http://"), ":")[0]
	if code, body := served(t, sandboxURL+"/"); code != 200 || !strings.Contains(body, sandboxURL) {
		t.Fatalf("the sandbox before: %d", code)
	}
	// The sandbox host resolves to the edge, as a wildcard record would.
	dns.Set(t, sandboxHost, "A 127.0.0.1")
	path := "/api/app/sites/" + id + "/domain"

	connected := d.owner.Do("PUT", path, map[string]any{"hostname": "shop.example.com"}).Must(t, 200)
	if connected.Str("domain.status") != "pending_dns" || connected.Str("domain.target") != sandboxHost {
		t.Fatalf("connect: %s", connected.Raw)
	}
	// Wrong records: an A record where a CNAME belongs.
	dns.Set(t, "shop.example.com", "A 127.0.0.1")
	checked := d.owner.Do("POST", path+"/check", nil).Must(t, 200)
	if checked.Str("domain.status") != "pending_dns" ||
		!strings.Contains(checked.Str("domain.lastError"), "no CNAME record: replace them with a CNAME record with the value "+sandboxHost) {
		t.Fatalf("wrong records: %s", checked.Raw)
	}
	roots := pebble.IssuerRoots(t)
	if _, _, err := httpsGet(edgeTLS, roots, "https://shop.example.com/", nil); err == nil {
		t.Fatal("a pending domain was served over https")
	}
	if n := pebble.Orders(); n != 0 {
		t.Fatalf("a pending domain made %d certificate orders:\n%s", n, pebble.Log())
	}

	dns.Set(t, "shop.example.com", "CNAME "+sandboxHost+".")
	checked = d.owner.Do("POST", path+"/check", nil).Must(t, 200)
	if checked.Str("domain.status") != "verifying" {
		t.Fatalf("right records: %s", checked.Raw)
	}
	if job := d.waitJob(t, checked.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("the move to the domain: %v", job)
	}
	if got := d.owner.Do("GET", path, nil).Must(t, 200); got.Str("domain.status") != "active" {
		t.Fatalf("after the move: %s", got.Raw)
	}

	// HTTPS at the new name, with Pebble's certificate, WordPress
	// answering there.
	var resp *http.Response
	var body string
	st.WaitFor(t, time.Minute, "https://shop.example.com through the edge", func() bool {
		var err error
		resp, body, err = httpsGet(edgeTLS, roots, "https://shop.example.com/", nil)
		return err == nil && resp.StatusCode == 200
	})
	if !strings.Contains(body, `href="https://shop.example.com/`) || strings.Contains(body, sandboxHost) {
		t.Fatalf("WordPress at the domain does not link to it:\n%.2000s", body)
	}
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; !strings.Contains(issuer, "Pebble") {
		t.Fatalf("certificate issued by %q", issuer)
	}
	serial := resp.TLS.PeerCertificates[0].SerialNumber.String()
	if n := pebble.Orders(); n != 1 {
		t.Fatalf("%d orders for one domain", n)
	}
	// Plain HTTP to the domain, and the sandbox URL, lead to it.
	noFollow := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", "http://"+edgeAddr+"/shop/?p=1", nil)
	req.Host = "shop.example.com"
	hr, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if loc := hr.Header.Get("Location"); hr.StatusCode != 308 || loc != "https://shop.example.com:"+strconv.Itoa(portNumber(t, edgeTLS))+"/shop/?p=1" {
		t.Fatalf("http on the domain: %d %q", hr.StatusCode, loc)
	}
	req, _ = http.NewRequest("GET", "http://"+edgeAddr+"/", nil)
	req.Host = sandboxHost + ":" + strconv.Itoa(portNumber(t, edgeAddr))
	hr, err = noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if loc := hr.Header.Get("Location"); hr.StatusCode != 307 || loc != "https://shop.example.com/" {
		t.Fatalf("the sandbox URL after the move: %d %q", hr.StatusCode, loc)
	}
	// A one-time login lands signed in at the domain.
	link := d.owner.Do("POST", "/api/sites/"+id+"/magic-login", nil).Must(t, 200).Str("url")
	if !strings.HasPrefix(link, "https://shop.example.com/?sandbox_login=") {
		t.Fatalf("login link: %s", link)
	}
	jar, _ := cookiejar.New(nil)
	resp, body, err = httpsGet(edgeTLS, roots, link, jar)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(body, "wp-admin-bar") || resp.Request.URL.Host != "shop.example.com" {
		t.Fatalf("sign-in at the domain: %v %v %s\n%.1000s", err, resp, resp.Request.URL, body)
	}

	// A second edge, its own process, serves the same certificate from
	// the storage they share: no second order.
	edge2TLS := freeAddr(t)
	e2 := start(t, []string{"SANDBOXD_JOIN_TOKEN=" + joinToken(t, dir, "edge", "edge-2")}, "edge", "--id", "edge-2",
		"--control-plane", readKey(t, filepath.Join(dir, "cluster-url")), "--data-dir", t.TempDir(), "--addr", freeAddr(t), "--tls-addr", edge2TLS,
		"--acme-ca", pebble.Directory, "--acme-ca-root", pebble.ServerRootFile, "--log-format", "json")
	e2.waitLine(t, "sandboxd edge:")
	st.WaitFor(t, time.Minute, "the second edge to serve the domain", func() bool {
		resp, _, err = httpsGet(edge2TLS, roots, "https://shop.example.com/", nil)
		return err == nil && resp.StatusCode == 200
	})
	if got := resp.TLS.PeerCertificates[0].SerialNumber.String(); got != serial || pebble.Orders() != 1 {
		t.Fatalf("second edge: serial %s (first %s), %d orders", got, serial, pebble.Orders())
	}

	// Disconnect: no route at once, WordPress back on the sandbox URL.
	del := d.owner.Do("DELETE", path, nil).Must(t, 200)
	st.WaitFor(t, time.Minute, "the edge to drop the domain", func() bool {
		req, _ := http.NewRequest("GET", "http://"+edgeAddr+"/", nil)
		req.Host = "shop.example.com"
		hr, err := noFollow.Do(req)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(hr.Body)
		hr.Body.Close()
		return hr.StatusCode == 404 && strings.Contains(string(b), "No sandbox here")
	})
	if job := d.waitJob(t, del.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("the move back: %v", job)
	}
	if code, body := served(t, sandboxURL+"/"); code != 200 || !strings.Contains(body, `href="`+sandboxURL+`/`) || strings.Contains(body, "shop.example.com") {
		t.Fatalf("the sandbox after the disconnect: %d\n%.2000s", code, body)
	}
	if _, _, err := httpsGet(edgeTLS, roots, "https://shop.example.com/", nil); err == nil {
		t.Fatal("a disconnected domain is still served over https")
	}
}

// httpsGet fetches url through the edge at addr, trusting roots, and
// follows redirects through the same edge.
func httpsGet(addr string, roots *x509.CertPool, url string, jar http.CookieJar) (*http.Response, string, error) {
	client := &http.Client{Timeout: 90 * time.Second, Jar: jar, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func portNumber(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}
