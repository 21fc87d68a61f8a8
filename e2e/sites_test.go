package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/hostclaim"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/toolbox"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/sitepath"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// devSystem is a running `sandboxd dev` with its API client.
type devSystem struct {
	dir, api, edge string
	proc           *proc
	owner          *st.Client
	email          string // owner's
}

// startDev starts `sandboxd dev` on the test binary's shared containerd.
func startDev(t *testing.T, dir, api, edge string, flags ...string) *devSystem {
	t.Helper()
	return launchDev(t, dir, api, edge, append(sharedContainerd(t), flags...)...)
}

// startDevOwnContainerd starts `sandboxd dev` as `make run` does, on a
// containerd it starts under its data dir (offering PHP 8.2 only, so
// that it imports no image the test does not use).
func startDevOwnContainerd(t *testing.T, dir, api, edge string) *devSystem {
	t.Helper()
	return launchDev(t, dir, api, edge, "--php-versions", "8.2")
}

func launchDev(t *testing.T, dir, api, edge string, flags ...string) *devSystem {
	t.Helper()
	// Each test system's SSH gateway on a port of its own, unless the
	// test names one.
	if !slices.Contains(flags, "--ssh-addr") {
		flags = append(flags, "--ssh-addr", "127.0.0.1:0")
	}
	p := start(t, nil, append([]string{"dev", "--data-dir", dir, "--api-addr", api, "--edge-addr", edge, "--log-format", "json"}, flags...)...)
	url := p.waitLine(t, "SANDBOX_URL=")
	token := p.waitLine(t, "SANDBOX_TOKEN=")
	return &devSystem{dir: dir, api: api, edge: edge, proc: p, owner: st.NewClient(t, url, token), email: "owner@localhost"}
}

// putFile writes a file into a site's WordPress root through the file
// manager, as the site's own user inside its container: tests never
// reach into a site's files from the host.
func (d *devSystem) putFile(t *testing.T, siteID, path, content string) {
	t.Helper()
	d.owner.Do("POST", "/api/app/sites/"+siteID+"/files/write?path="+sitepath.Encode(path),
		map[string]string{"contentBase64": base64.StdEncoding.EncodeToString([]byte(content))}).Must(t, 200)
}

func (d *devSystem) waitJob(t *testing.T, id string) map[string]any {
	t.Helper()
	var job map[string]any
	st.WaitFor(t, 2*time.Minute, "job "+id, func() bool {
		job = d.owner.Do("GET", "/api/app/jobs/"+id, nil).Must(t, 200).Get("job").(map[string]any)
		return job["status"] == "succeeded" || job["status"] == "failed"
	})
	return job
}

// localhostClient resolves *.localhost to loopback, as browsers and curl
// do (RFC 6761) and Go's resolver does not.
var localhostClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err == nil && strings.HasSuffix(host, ".localhost") {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	},
}}

// served fetches a site's page once the edge serves it: right after a
// job ends (or a claim answers), the edge may not have the site's ready
// route yet (its route table follows the state a moment later) and
// answer 503 "being created" or 404 "No sandbox here".
func served(t *testing.T, url string) (int, string) {
	t.Helper()
	var code int
	var body string
	st.WaitFor(t, time.Minute, "the edge to serve "+url, func() bool {
		code, body = fetch(t, url)
		creating := code == http.StatusServiceUnavailable && strings.Contains(body, "being created")
		unknown := code == http.StatusNotFound && strings.Contains(body, "No sandbox here")
		return !creating && !unknown
	})
	return code, body
}

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := localhostClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSiteEndToEnd is the first real sandbox: create through the API,
// served by WordPress through the edge, signed in through a magic link in
// a real browser, kept across a restart, and deleted without a trace.
func TestSiteEndToEnd(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dir := devDataDir(t)
	api, edgeAddr := freeAddr(t), freeAddr(t)
	d := startDev(t, dir, api, edgeAddr)

	// Bad input first: nothing is created.
	for _, tc := range []struct {
		body, code string
	}{
		{`{"phpVersion":"abc"}`, "invalid_request"},
		{`{"phpVersion":"9.9"}`, "invalid_request"},
		{`{"phpVersion":8.2}`, "invalid_request"},
		{`{"phpVersion":"8.1"}`, "php_version_unavailable"},
		{`{"name":"x","color":"red"}`, "invalid_request"},
	} {
		r := d.owner.Do("POST", "/api/app/sites", tc.body)
		if r.Status != 400 || r.Code() != tc.code || r.Details()["field"] == nil {
			t.Fatalf("%s: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	if n := len(d.owner.Do("GET", "/api/app/sites", nil).Must(t, 200).List("sites")); n != 0 {
		t.Fatalf("bad requests left %d sites", n)
	}

	created := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Launch Party"}).Must(t, 202)
	id, url := created.Str("site.id"), created.Str("site.url")
	if created.Str("site.status") != "creating" || !strings.HasSuffix(url, ".localhost:"+strings.Split(edgeAddr, ":")[1]) {
		t.Fatalf("created: %s", created.Raw)
	}
	// Readiness is needed for a login link and a reset; the site takes
	// over a second to provision, so it is still creating here.
	for _, path := range []string{"/api/sites/" + id + "/magic-login", "/api/app/sites/" + id + "/reset"} {
		if r := d.owner.Do("POST", path, nil); r.Status != 400 || r.Code() != "invalid_request" || r.Details()["status"] != "creating" {
			t.Fatalf("%s while creating: %d %s", path, r.Status, r.Raw)
		}
	}
	if job := d.waitJob(t, created.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("create job: %v", job)
	}
	site := d.owner.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200)
	if site.Str("site.status") != "ready" || !strings.HasPrefix(site.Str("site.wordpressVersion"), "6.1") {
		t.Fatalf("site: %s", site.Raw)
	}
	code, body := fetch(t, url+"/")
	if code != 200 || !strings.Contains(body, "Launch Party") {
		t.Fatalf("through the edge: %d %.300s", code, body)
	}

	t.Run("magic login in a browser", func(t *testing.T) {
		link := d.owner.Do("POST", "/api/sites/"+id+"/magic-login", nil).Must(t, 200)
		if link.Str("token") == "" || link.Str("expiresAt") == "" || !strings.HasPrefix(link.Str("url"), url) {
			t.Fatalf("link: %s", link.Raw)
		}
		ctx, cancel := browser(t)
		defer cancel()
		loc, text := visit(t, ctx, link.Str("url"))
		if !strings.Contains(loc, "/wp-admin/") || !strings.Contains(text, "Dashboard") {
			t.Fatalf("landed at %s: %.300s", loc, text)
		}
		// The same link in another browser does not sign in.
		ctx2, cancel2 := browser(t)
		defer cancel2()
		loc2, text2 := visit(t, ctx2, link.Str("url"))
		if strings.Contains(loc2, "/wp-admin/") || !strings.Contains(text2, "already used") {
			t.Fatalf("second use landed at %s: %.300s", loc2, text2)
		}
	})

	t.Run("debug log", func(t *testing.T) {
		base := "/api/app/sites/" + id + "/debug"
		if r := d.owner.Do("GET", base, nil).Must(t, 200); r.Get("debug.wpDebug") != false {
			t.Fatal(r.Raw)
		}
		if r := d.owner.Do("GET", base+"/log", nil).Must(t, 200); r.Get("exists") != false || r.Str("content") != "" {
			t.Fatalf("no log yet: %s", r.Raw)
		}
		set := d.owner.Do("PUT", base, map[string]bool{"wpDebug": true, "wpDebugLog": true}).Must(t, 200)
		if set.Get("debug.wpDebug") != true || set.Get("debug.wpDebugLog") != true || set.Get("debug.wpDebugDisplay") != false {
			t.Fatal(set.Raw)
		}
		// A page of the site that raises warnings.
		d.putFile(t, id, "warn.php", `<?php require __DIR__.'/wp-load.php'; for ($i = 0; $i < 3; $i++) { trigger_error("sandbox-e2e-warning-$i", E_USER_WARNING); } echo 'ok';`)
		if code, body := fetch(t, url+"/warn.php"); code != 200 || strings.Contains(body, "sandbox-e2e-warning") {
			t.Fatalf("warning page: %d %s", code, body)
		}
		log := d.owner.Do("GET", base+"/log", nil).Must(t, 200)
		if log.Get("exists") != true || !strings.Contains(log.Str("content"), "sandbox-e2e-warning-2") || log.Get("lines").(float64) < 3 {
			t.Fatalf("log: %s", log.Raw)
		}
		one := d.owner.Do("GET", base+"/log?lines=1", nil).Must(t, 200)
		if one.Get("lines") != float64(1) || !strings.Contains(one.Str("content"), "sandbox-e2e-warning-2") || one.Get("truncated") != false {
			t.Fatalf("last line: %s", one.Raw)
		}
		// The site's own PHP makes its log a 4 GiB sparse file: the tail
		// reads only its end, and the site's 1 GiB disk holds it (sparse).
		d.putFile(t, id, "big.php", `<?php $f = fopen(__DIR__.'/wp-content/debug.log', 'c'); fseek($f, 4 << 30); echo fwrite($f, "sandbox-last-line\n") ? 'ok' : 'no';`)
		if code, body := fetch(t, url+"/big.php"); code != 200 || body != "ok" {
			t.Fatalf("sparse log page: %d %s", code, body)
		}
		huge := d.owner.Do("GET", base+"/log?lines=1", nil).Must(t, 200)
		if huge.Get("truncated") != true || !strings.Contains(huge.Str("content"), "sandbox-last-line") {
			t.Fatalf("tail of a 4 GiB log: %.300s", huge.Raw)
		}
		// Then cuts it back to exactly 4 GiB: its last MiB and more hold
		// not one newline. The tail is that bounded end, and says there
		// is more.
		d.putFile(t, id, "cut.php", `<?php $f = fopen(__DIR__.'/wp-content/debug.log', 'c'); echo ftruncate($f, 4 << 30) && fstat($f)['size'] === (4 << 30) ? 'ok' : 'no';`)
		if code, body := fetch(t, url+"/cut.php"); code != 200 || body != "ok" {
			t.Fatalf("ftruncate page: %d %s", code, body)
		}
		cut := d.owner.Do("GET", base+"/log?lines=1", nil)
		if n := len(cut.Str("content")); cut.Status != 200 || cut.Get("exists") != true || cut.Get("truncated") != true || n == 0 || n > toolbox.MaxDebugLogBytes {
			t.Fatalf("tail of a 4 GiB log without a newline: status %d, exists %v, truncated %v, %d bytes of content: %.200s",
				cut.Status, cut.Get("exists"), cut.Get("truncated"), n, cut.Raw)
		}
		d.owner.Do("DELETE", base+"/log", nil).Must(t, 200)
		if r := d.owner.Do("GET", base+"/log?lines=abc", nil).Must(t, 200); r.Str("content") != "" {
			t.Fatalf("after truncate: %s", r.Raw)
		}
		d.owner.Do("PUT", base, map[string]bool{"wpDebug": false}).Must(t, 200)
	})

	t.Run("php.ini settings", func(t *testing.T) {
		r := d.owner.Do("PUT", "/api/app/sites/"+id+"/php-config", map[string]any{"settings": map[string]any{
			"memory_limit": "128m", "max_input_vars": 3000, "display_errors": "off"}}).Must(t, 202)
		if r.Str("phpConfig.settings.memory_limit") != "128M" || r.Str("phpConfig.settings.display_errors") != "Off" {
			t.Fatal(r.Raw)
		}
		if job := d.waitJob(t, r.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("job: %v", job)
		}
		d.putFile(t, id, "ini.php", `<?php echo ini_get('memory_limit'), ' ', ini_get('max_input_vars'), ' ', ini_get('upload_max_filesize');`)
		if code, body := fetch(t, url+"/ini.php"); code != 200 || body != "128M 3000 64M" {
			t.Fatalf("PHP sees %d %q", code, body)
		}
		if code, body := fetch(t, url+"/"); code != 200 || !strings.Contains(body, "Launch Party") {
			t.Fatal("the site stopped serving")
		}
		got := d.owner.Do("GET", "/api/app/sites/"+id+"/php-config", nil).Must(t, 200)
		if got.Str("phpConfig.settings.max_input_vars") != "3000" || got.Str("phpConfig.settings.post_max_size") != "64M" {
			t.Fatal(got.Raw)
		}
	})

	t.Run("php version switch with rollback", func(t *testing.T) {
		d.putFile(t, id, "v.php", `<?php echo PHP_MAJOR_VERSION, '.', PHP_MINOR_VERSION;`)
		switchTo := func(v string) map[string]any {
			r := d.owner.Do("PUT", "/api/app/sites/"+id+"/php-version", map[string]string{"phpVersion": v}).Must(t, 202)
			if r.Str("phpVersion") != v || r.Str("jobId") == "" {
				t.Fatal(r.Raw)
			}
			return d.waitJob(t, r.Str("jobId"))
		}
		for _, v := range []string{"7.4", "8.2"} {
			if job := switchTo(v); job["status"] != "succeeded" {
				t.Fatalf("switch to %s: %v", v, job)
			}
			if code, body := fetch(t, url+"/v.php"); code != 200 || body != v {
				t.Fatalf("after switching to %s the site runs %d %q", v, code, body)
			}
			if code, body := fetch(t, url+"/"); code != 200 || !strings.Contains(body, "Launch Party") {
				t.Fatalf("after switching to %s the home page answers %d", v, code)
			}
			if got := d.owner.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200).Str("site.phpVersion"); got != v {
				t.Fatalf("site says PHP %s", got)
			}
		}
		// No image for 8.1 on this node: the job fails, the site stays.
		job := switchTo("8.1")
		msg, _ := job["error"].(map[string]any)["message"].(string)
		if job["status"] != "failed" || !strings.Contains(msg, "8.1") {
			t.Fatalf("switch to 8.1: %v", job)
		}
		site := d.owner.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200)
		if site.Str("site.phpVersion") != "8.2" || site.Str("site.status") != "ready" {
			t.Fatal(site.Raw)
		}
		if code, body := fetch(t, url+"/v.php"); code != 200 || body != "8.2" {
			t.Fatalf("after a failed switch: %d %q", code, body)
		}
	})

	t.Run("outgoing mail is captured", func(t *testing.T) {
		base := "/api/app/sites/" + id + "/email"
		// A fresh site is a clone of the node's stock install: the
		// install's "New WordPress Site" mail went to that one, not here.
		if first := d.owner.Do("GET", base, nil).Must(t, 200).List("emails"); len(first) != 0 {
			t.Fatalf("mail before any was sent: %v", first)
		}
		d.owner.Do("DELETE", base, nil).Must(t, 200)
		if r := d.owner.Do("GET", base, nil).Must(t, 200); len(r.List("emails")) != 0 {
			t.Fatalf("after clearing: %s", r.Raw)
		}
		// A password-reset request makes WordPress send mail.
		resp, err := localhostClient.PostForm(url+"/wp-login.php?action=lostpassword", map[string][]string{"user_login": {"admin"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		d.putFile(t, id, "mail.php", `<?php require __DIR__.'/wp-load.php'; echo wp_mail('dev@example.com', 'Sandbox e2e mail', 'Plain body') ? 'sent' : 'failed';`)
		if code, body := fetch(t, url+"/mail.php"); code != 200 || body != "sent" {
			t.Fatalf("wp_mail: %d %q", code, body)
		}
		mails := d.owner.Do("GET", base, nil).Must(t, 200).List("emails")
		if len(mails) != 2 || mails[0]["subject"] != "Sandbox e2e mail" || mails[0]["to"] != "dev@example.com" ||
			!strings.Contains(mails[0]["text"].(string), "Plain body") || mails[0]["date"] == nil {
			t.Fatalf("newest mail: %v", mails)
		}
		if subj, _ := mails[1]["subject"].(string); !strings.Contains(subj, "Password Reset") {
			t.Fatalf("password reset mail: %v", mails[1])
		}
		d.owner.Do("DELETE", base, nil).Must(t, 200)
		if r := d.owner.Do("GET", base, nil).Must(t, 200); len(r.List("emails")) != 0 {
			t.Fatal("mail left after clearing")
		}
	})

	t.Run("file manager", func(t *testing.T) {
		fm := func(method, op string, q map[string]string, body any, header ...string) *st.Response {
			path := "/api/app/sites/" + id + "/files"
			if op != "" {
				path += "/" + op
			}
			sep := "?"
			for k, v := range q {
				path += sep + k + "=" + v
				sep = "&"
			}
			return d.owner.Do(method, path, body, header...)
		}
		enc := sitepath.Encode
		b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
		hostRoot := filepath.Join(dir, "agent", "sites", "fs", id, "disk")
		var rec struct{ UID uint32 }
		if b, err := os.ReadFile(filepath.Join(dir, "agent", "sites", "records", id+".json")); err != nil || json.Unmarshal(b, &rec) != nil || rec.UID < agent.FirstSiteUID {
			t.Fatalf("site record: %v %+v", err, rec)
		}

		fm("POST", "write", map[string]string{"path": enc("wp-content/notes/hello.txt")}, map[string]string{"contentBase64": b64("hi there")}).Must(t, 200)
		if r := fm("GET", "content", map[string]string{"path": enc("wp-content/notes/hello.txt")}, nil).Must(t, 200); r.Str("contentBase64") != b64("hi there") || r.Get("sizeBytes") != float64(8) {
			t.Fatalf("read back: %s", r.Raw)
		}
		fm("POST", "mkdir", map[string]string{"path": enc("wp-content/notes/sub")}, nil).Must(t, 200)
		fm("POST", "copy", map[string]string{"from": enc("wp-content/notes/hello.txt"), "to": enc("wp-content/notes/sub/copy.txt")}, nil).Must(t, 200)
		fm("POST", "rename", map[string]string{"from": enc("wp-content/notes/sub/copy.txt"), "to": enc("wp-content/notes/moved.txt")}, nil).Must(t, 200)
		body, ct := st.Multipart(nil, "file", "upload.txt", []byte("uploaded bytes"))
		fm("POST", "upload", map[string]string{"path": enc("wp-content/notes")}, body, "Content-Type", ct).Must(t, 200)
		list := fm("GET", "", map[string]string{"path": enc("wp-content/notes")}, nil).Must(t, 200)
		names := map[string]string{}
		for _, e := range list.List("entries") {
			names[e["name"].(string)] = e["type"].(string)
		}
		if names["hello.txt"] != "file" || names["moved.txt"] != "file" || names["upload.txt"] != "file" || names["sub"] != "directory" ||
			list.Get("truncated") != false {
			t.Fatalf("listing: %s", list.Raw)
		}
		// Files belong to the site's user, as if WordPress wrote them.
		if info, err := os.Stat(filepath.Join(hostRoot, "wordpress", "wp-content", "notes", "upload.txt")); err != nil || info.Sys().(*syscall.Stat_t).Uid != rec.UID {
			t.Fatalf("uploaded file: %v", err)
		}
		if r := fm("POST", "rename", map[string]string{"from": enc("wp-content/notes/hello.txt"), "to": enc("wp-content/notes/moved.txt")}, nil); r.Status != 409 {
			t.Fatalf("rename onto an existing file: %d %s", r.Status, r.Raw)
		}
		if r := fm("GET", "content", map[string]string{"path": enc("wp-content/nope.txt")}, nil); r.Status != 404 || r.Code() != "file_not_found" {
			t.Fatalf("missing file: %d %s", r.Status, r.Raw)
		}

		// Symlinks the site planted that lead out of the WordPress root.
		wp := filepath.Join(hostRoot, "wordpress")
		for name, target := range map[string]string{"to-etc": "/etc", "to-conf": "/srv/site/conf", "to-config": "../wp-config.php", "to-tmp": "/srv/site/tmp"} {
			if err := os.Symlink(target, filepath.Join(wp, name)); err != nil {
				t.Fatal(err)
			}
		}
		before := fm("GET", "", nil, nil).Must(t, 200).Raw
		tmpBefore, _ := os.ReadDir(filepath.Join(hostRoot, "tmp"))
		padded := base64.URLEncoding.EncodeToString([]byte("wp-content/x.txt"))
		std := base64.RawStdEncoding.EncodeToString([]byte("wp-content/??>")) // has a '/'
		if !strings.ContainsAny(std, "+/") {
			t.Fatalf("%s is valid base64url too: the case would prove nothing", std)
		}
		std = strings.NewReplacer("+", "%2B", "/", "%2F").Replace(std)
		good := enc("wp-content/notes/hello.txt")
		corpus := []struct {
			name, op string
			q        map[string]string
		}{
			{"dotdot write", "write", map[string]string{"path": enc("../escape.txt")}},
			{"inner dotdot", "write", map[string]string{"path": enc("wp-content/../../escape.txt")}},
			{"absolute", "write", map[string]string{"path": enc("/tmp/escape.txt")}},
			{"nul", "write", map[string]string{"path": enc("wp-content/a\x00b")}},
			{"padded base64", "write", map[string]string{"path": padded}},
			{"standard alphabet", "write", map[string]string{"path": std}},
			{"crlf in encoding", "write", map[string]string{"path": good[:6] + "%0D%0A" + good[6:]}},
			{"symlink dir to tmp", "write", map[string]string{"path": enc("to-tmp/planted.txt")}},
			{"symlink to conf", "write", map[string]string{"path": enc("to-conf/start.sh")}},
			{"read through symlink", "read", map[string]string{"path": enc("to-etc/passwd")}},
			{"read symlinked file", "read", map[string]string{"path": enc("to-config")}},
			{"mkdir via symlink", "mkdir", map[string]string{"path": enc("to-tmp/newdir")}},
			{"delete via symlink", "delete", map[string]string{"path": enc("to-conf/apache.conf")}},
			{"copy out", "copy", map[string]string{"from": enc("wp-content/notes/hello.txt"), "to": enc("to-tmp/copied.txt")}},
			{"copy in", "copy", map[string]string{"from": enc("to-config"), "to": enc("wp-content/stolen.php")}},
			{"rename out", "rename", map[string]string{"from": enc("wp-content/notes/hello.txt"), "to": enc("../hello.txt")}},
			{"delete root", "delete", map[string]string{"path": enc(".")}},
		}
		for _, c := range corpus {
			var r *st.Response
			if c.op == "read" {
				r = fm("GET", "content", c.q, nil)
			} else {
				r = fm("POST", c.op, c.q, map[string]string{"contentBase64": b64("pwned")})
			}
			if r.Status != 400 || r.Code() != "invalid_request" {
				t.Errorf("%s: %d %s", c.name, r.Status, r.Raw)
			}
		}
		if after := fm("GET", "", nil, nil).Must(t, 200).Raw; !bytes.Equal(before, after) {
			t.Errorf("the root changed:\n%s\n%s", before, after)
		}
		tmpAfter, _ := os.ReadDir(filepath.Join(hostRoot, "tmp"))
		if len(tmpAfter) != len(tmpBefore) {
			t.Errorf("files appeared in the site's tmp: %v → %v", tmpBefore, tmpAfter)
		}
		for _, p := range []string{filepath.Join(hostRoot, "escape.txt"), "/tmp/escape.txt", filepath.Join(hostRoot, "..", "conf", "start.sh")} {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "pwned") {
				t.Errorf("%s was written", p)
			}
		}
		if _, err := os.Stat(filepath.Join(hostRoot, "..", "conf", "apache.conf")); err != nil {
			t.Errorf("apache.conf deleted: %v", err)
		}
		fm("POST", "delete", map[string]string{"path": enc("wp-content/notes")}, nil).Must(t, 200)
		for name := range map[string]bool{"to-etc": true, "to-conf": true, "to-config": true, "to-tmp": true} {
			fm("POST", "delete", map[string]string{"path": enc(name)}, nil).Must(t, 200)
		}
		if _, err := os.Stat("/etc/passwd"); err != nil {
			t.Fatal("deleting a symlink followed it")
		}
	})

	t.Run("database access", func(t *testing.T) {
		db := d.owner.Do("GET", "/api/app/sites/"+id+"/database", nil).Must(t, 200)
		adminer := db.Str("database.adminerUrl")
		if db.Str("database.name") == "" || db.Str("database.user") == "" || db.Str("database.password") == "" || adminer == "" {
			t.Fatalf("database: %s", db.Raw)
		}
		jar, _ := cookiejar.New(nil)
		jarClient := &http.Client{Timeout: 30 * time.Second, Transport: localhostClient.Transport, Jar: jar}
		get := func(c *http.Client, u string) (int, string) {
			resp, err := c.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		code, page := get(jarClient, adminer)
		if code != 200 || !strings.Contains(page, db.Str("database.name")) || !strings.Contains(page, "wp_options") {
			t.Fatalf("Adminer: %d %.500s", code, page)
		}
		// Only that database: Adminer's database menu offers no other.
		_, menu, ok := strings.Cut(page, "<select name='db'>")
		menu, _, _ = strings.Cut(menu, "</select>")
		if !ok || strings.Count(menu, "<option") != 2 || !strings.Contains(menu, "<option selected>"+db.Str("database.name")) {
			t.Fatalf("database menu: %q", menu)
		}
		// The link works once; a fresh browser cannot reuse it.
		fresh := &http.Client{Timeout: 30 * time.Second, Transport: localhostClient.Transport}
		if code, _ := get(fresh, adminer); code != 403 {
			t.Fatalf("reused link: %d", code)
		}
		if code, _ := get(fresh, strings.Split(adminer, "?")[0]); code != 403 {
			t.Fatalf("Adminer without a link: %d", code)
		}
		// A person clicking a fresh link in a real browser lands in Adminer,
		// signed in to the site's database with its tables listed.
		ctx, cancel := browser(t)
		defer cancel()
		link := d.owner.Do("GET", "/api/app/sites/"+id+"/database", nil).Must(t, 200).Str("database.adminerUrl")
		loc, text := visit(t, ctx, link)
		if !strings.Contains(loc, "db="+db.Str("database.name")) || !strings.Contains(text, "wp_options") || strings.Contains(loc, "sandbox_token") {
			t.Fatalf("browser landed at %s: %.500s", loc, text)
		}
	})

	t.Run("library plugin deploy", func(t *testing.T) {
		zip := wpzip.BuildPlugin("sandbox-banner", "Sandbox Banner", "1.0.0",
			`add_action('wp_footer', function () { echo '<p id="sandbox-banner">banner-from-library</p>'; });`)
		body, ct := st.Multipart(map[string]string{"licenseKey": "BANNER-KEY-0123456789"}, "file", "sandbox-banner.zip", zip)
		entry := d.owner.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct).Must(t, 201)
		if entry.Str("plugin.slug") != "sandbox-banner" || strings.Contains(string(entry.Raw), "BANNER-KEY") {
			t.Fatalf("entry: %s", entry.Raw)
		}
		dep := d.owner.Do("POST", "/api/app/sites/"+id+"/plugins", map[string]any{"libraryPlugin": "sandbox-banner", "activate": true}).Must(t, 202)
		if job := d.waitJob(t, dep.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("deploy job: %v", job)
		}
		var found bool
		for _, p := range d.owner.Do("GET", "/api/app/sites/"+id+"/plugins", nil).Must(t, 200).List("plugins") {
			if p["slug"] == "sandbox-banner" && p["kind"] == "plugin" {
				found = p["active"] == true
			}
		}
		if !found {
			t.Fatal("plugin not listed as active")
		}
		if code, page := fetch(t, url+"/"); code != 200 || !strings.Contains(page, "banner-from-library") {
			t.Fatalf("plugin output missing: %d", code)
		}
		// A new version replaces the installed copy.
		v2 := wpzip.BuildPlugin("sandbox-banner", "Sandbox Banner", "2.0.0",
			`add_action('wp_footer', function () { echo '<p id="sandbox-banner">banner-version-two</p>'; });`)
		up2, ct2 := st.Multipart(map[string]string{"activate": "true"}, "file", "sandbox-banner.zip", v2)
		if job := d.waitJob(t, d.owner.Do("POST", "/api/app/sites/"+id+"/plugins", up2, "Content-Type", ct2).Must(t, 202).Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("upgrade: %v", job)
		}
		if _, page := fetch(t, url+"/"); !strings.Contains(page, "banner-version-two") || strings.Contains(page, "banner-from-library") {
			t.Fatal("the upgrade did not replace the plugin")
		}
		// A theme from the Library, activated.
		theme := wpzip.BuildTheme("sandbox-theme", "Sandbox Theme", "1.0", `echo "<html><body>sandbox-theme-home " . esc_html(get_bloginfo('name')) . "</body></html>";`)
		tb, tct := st.Multipart(nil, "file", "sandbox-theme.zip", theme)
		if k := d.owner.Do("POST", "/api/app/plugin-library", tb, "Content-Type", tct).Must(t, 201).Str("plugin.kind"); k != "theme" {
			t.Fatalf("theme kind %q", k)
		}
		tj := d.owner.Do("POST", "/api/app/sites/"+id+"/plugins", map[string]any{"libraryPlugin": "sandbox-theme", "activate": true}).Must(t, 202)
		if job := d.waitJob(t, tj.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("theme deploy: %v", job)
		}
		if _, page := fetch(t, url+"/"); !strings.Contains(page, "sandbox-theme-home") {
			t.Fatalf("theme not active: %.300s", page)
		}
		// A URL on loopback is refused (no operator allow-list in dev): an
		// address in the URL by the request at once, a name resolving to
		// one by the deploy job, which downloads zipUrl.
		lo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(zip) }))
		defer lo.Close()
		if r := d.owner.Do("POST", "/api/app/sites/"+id+"/plugins", map[string]any{"zipUrl": lo.URL + "/p.zip"}); r.Status != 400 || !strings.Contains(r.Str("error.message"), "not allowed") {
			t.Fatalf("loopback zipUrl: %d %s", r.Status, r.Raw)
		}
		byName := strings.Replace(lo.URL, "127.0.0.1", "localhost", 1) + "/p.zip"
		lj := d.waitJob(t, d.owner.Do("POST", "/api/app/sites/"+id+"/plugins", map[string]any{"zipUrl": byName}).Must(t, 202).Str("jobId"))
		je, _ := lj["error"].(map[string]any)
		if msg, _ := je["message"].(string); lj["status"] != "failed" || je["code"] != "zip_fetch_failed" || !strings.Contains(msg, "not allowed") {
			t.Fatalf("zipUrl resolving to loopback: %v", lj)
		}
		// A multipart upload deploys too; a ZIP with a traversal entry is refused.
		up, upCT := st.Multipart(map[string]string{"activate": "false"}, "file", "x.zip", wpzip.BuildPlugin("second", "Second", "2", ""))
		d2 := d.owner.Do("POST", "/api/app/sites/"+id+"/plugins", up, "Content-Type", upCT).Must(t, 202)
		if job := d.waitJob(t, d2.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("upload deploy: %v", job)
		}
		evil := wpzip.BuildRaw([2]string{"evil/evil.php", "<?php\n/* Plugin Name: Evil */"}, [2]string{"evil/../../../wp-config.php", "pwned"})
		ev, evCT := st.Multipart(nil, "file", "evil.zip", evil)
		if r := d.owner.Do("POST", "/api/app/sites/"+id+"/plugins", ev, "Content-Type", evCT); r.Status != 400 || r.Code() != "invalid_request" {
			t.Fatalf("traversal ZIP: %d %s", r.Status, r.Raw)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "agent", "sites", "fs", id, "secrets", "wp-config.php")); strings.Contains(string(b), "pwned") {
			t.Fatal("the traversal ZIP wrote wp-config.php")
		}
		if r := d.owner.Do("POST", "/api/app/sites/"+id+"/plugins", map[string]any{"libraryPlugin": "nope"}); r.Status != 404 || r.Code() != "plugin_library_entry_not_found" {
			t.Fatalf("unknown entry: %d %s", r.Status, r.Raw)
		}
		if strings.Contains(d.proc.errText(), "BANNER-KEY-0123456789") {
			t.Fatal("license key in the dev logs")
		}
	})

	t.Run("another workspace cannot reach the site", func(t *testing.T) {
		if _, err := run(t, nil, "admin", "create-account", "--data-dir", dir, "--email", "eve@example.com", "--plan", "paid"); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, nil, "admin", "create-token", "--data-dir", dir, "--email", "eve@example.com")
		if err != nil {
			t.Fatal(err)
		}
		eve := st.NewClient(t, d.owner.Base, lastLine(out))
		for _, r := range []*st.Response{
			eve.Do("GET", "/api/app/sites/"+id, nil),
			eve.Do("POST", "/api/sites/"+id+"/magic-login", nil),
			eve.Do("DELETE", "/api/app/sites/"+id, nil),
			eve.Do("POST", "/api/app/sites/"+id+"/reset", nil),
		} {
			if r.Status != 404 || r.Code() != "site_not_found" {
				t.Fatalf("%d %s", r.Status, r.Raw)
			}
		}
	})

	// Restart: the sites keep being served. (Not a subtest: the restarted
	// process must outlive it.)
	d.proc.stop(t)
	d = startDev(t, dir, api, edgeAddr)
	st.WaitFor(t, 30*time.Second, "the site through the restarted edge", func() bool {
		code, body := fetch(t, url+"/")
		return code == 200 && strings.Contains(body, "Launch Party")
	})

	t.Run("delete leaves nothing", func(t *testing.T) {
		del := d.owner.Do("DELETE", "/api/app/sites/"+id, nil).Must(t, 202)
		if del.Str("site.status") != "deleting" {
			t.Fatal(del.Raw)
		}
		if job := d.waitJob(t, del.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("delete job: %v", job)
		}
		if code, _ := fetch(t, url+"/"); code != 404 {
			t.Fatalf("deleted site answers %d", code)
		}
		if r := d.owner.Do("DELETE", "/api/app/sites/"+id, nil); r.Status != 404 || r.Code() != "site_not_found" {
			t.Fatalf("second delete: %d %s", r.Status, r.Raw)
		}
		agentDir := filepath.Join(dir, "agent")
		if _, err := os.Stat(filepath.Join(agentDir, "sites", "fs", id)); !os.IsNotExist(err) {
			t.Fatal("site files left behind")
		}
		dbName := "wp_" + strings.TrimPrefix(id, "site_")
		pw, _ := os.ReadFile(filepath.Join(agentDir, "mariadb", "admin-password"))
		port, _ := os.ReadFile(filepath.Join(agentDir, "mariadb", "port"))
		c := mysql.NewConfig()
		c.User, c.Passwd, c.Net, c.Addr = "sandboxd", strings.TrimSpace(string(pw)), "tcp", "127.0.0.1:"+strings.TrimSpace(string(port))
		db, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow("SELECT (SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?) + (SELECT COUNT(*) FROM mysql.user WHERE User = ?)", dbName, dbName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatal("database or user left behind")
		}
		socket, _ := agenttest.Containerd(t)
		if b, err := os.ReadFile(filepath.Join(agentDir, "containerd-socket")); err != nil || strings.TrimSpace(string(b)) != socket {
			t.Fatalf("the agent did not record the shared containerd it uses: %q %v", b, err)
		}
		rt, err := runtime.Connect(socket, agent.Namespace(agentDir))
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		if ok, _ := rt.Exists(context.Background(), "wp-"+id); ok {
			t.Fatal("container left behind")
		}
	})
}

// TestTwoDevInstancesSideBySide runs two `sandboxd dev` on one machine
// with their own data dirs, ports and containerds, as `make run` does:
// each serves its own site, and stopping one leaves the other's site
// alone.
func TestTwoDevInstancesSideBySide(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dirA, dirB := devDataDir(t), devDataDir(t)
	a := startDevOwnContainerd(t, dirA, freeAddr(t), freeAddr(t))
	b := startDevOwnContainerd(t, dirB, freeAddr(t), freeAddr(t))
	create := func(d *devSystem, name string) string {
		r := d.owner.Do("POST", "/api/app/sites", map[string]string{"name": name}).Must(t, 202)
		if job := d.waitJob(t, r.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("%s: %v", name, job)
		}
		return r.Str("site.url")
	}
	urlA, urlB := create(a, "Alpha Instance"), create(b, "Beta Instance")
	for url, want := range map[string]string{urlA: "Alpha Instance", urlB: "Beta Instance"} {
		if code, body := fetch(t, url+"/"); code != 200 || !strings.Contains(body, want) {
			t.Fatalf("%s: %d", url, code)
		}
	}
	// Each edge knows only its own sites.
	hostB := strings.TrimPrefix(urlB, "http://")
	if code, _ := fetch(t, "http://"+strings.Split(hostB, ":")[0]+":"+strings.Split(a.edge, ":")[1]+"/"); code != 404 {
		t.Fatalf("instance A's edge serves B's site: %d", code)
	}
	// A stop or purge never pulls sites from under a running agent.
	for _, verb := range []string{"--stop", "--purge"} {
		if out, err := run(t, nil, "dev", verb, "--data-dir", dirB); err == nil || !strings.Contains(err.Error(), "an agent is running on this data dir") {
			t.Fatalf("dev %s while B runs: %v %s", verb, err, out)
		}
	}
	if code, _ := fetch(t, urlB+"/"); code != 200 {
		t.Fatalf("a refused stop took B's site down: %d", code)
	}
	b.proc.stop(t)
	if _, err := run(t, nil, "dev", "--stop", "--data-dir", dirB); err != nil {
		t.Fatal(err)
	}
	if code, body := fetch(t, urlA+"/"); code != 200 || !strings.Contains(body, "Alpha Instance") {
		t.Fatalf("stopping B took A's site down: %d", code)
	}
	// The purge leaves nothing of B on the host: no data dir, mount,
	// bridge, nftables table or host claim.
	if out, err := run(t, nil, "dev", "--purge", "--data-dir", dirB); err != nil || !strings.Contains(out, "purged") {
		t.Fatalf("dev --purge: %v %s", err, out)
	}
	if _, err := os.Stat(dirB); !os.IsNotExist(err) {
		t.Errorf("the data dir is still there: %v", err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), dirB) {
		t.Errorf("mounts left under %s", dirB)
	}
	name := agent.NetworkName(filepath.Join(dirB, "agent"))
	if out, _ := exec.Command("nft", "list", "tables").Output(); strings.Contains(string(out), "sandboxd_"+name) {
		t.Errorf("nftables tables left: %s", out)
	}
	if _, err := net.InterfaceByName("sbx" + name); err == nil {
		t.Errorf("bridge sbx%s left", name)
	}
	claims, _ := filepath.Glob(filepath.Join(hostclaim.DefaultDir, "*", "*"))
	for _, c := range claims {
		if owner, _ := os.ReadFile(c); strings.HasPrefix(string(owner), dirB+"/") {
			t.Errorf("claim %s still held for %s", c, owner)
		}
	}
	if code, body := fetch(t, urlA+"/"); code != 200 || !strings.Contains(body, "Alpha Instance") {
		t.Fatalf("purging B took A's site down: %d", code)
	}
}
