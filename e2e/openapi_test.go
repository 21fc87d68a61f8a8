package e2e

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/dnstest"
	"github.com/sandboxd/sandboxd/internal/gittest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/objstore/objstoretest"
	"github.com/sandboxd/sandboxd/internal/sitepath"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// prismBin is Stoplight Prism as deploy/dev/install-deps.sh installs it.
func prismBin(t *testing.T) string {
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cache, "sandboxd", "prism", "node_modules", ".bin", "prism")
	if _, err := os.Stat(bin); err != nil {
		hosttest.Missing(t, "Prism is not installed (deploy/dev/install-deps.sh installs it): %v", err)
	}
	return bin
}

// prismProxy is Stoplight Prism as a proxy in front of an API: it checks
// every answer against the document it was given and passes it on.
type prismProxy struct {
	base string
	cmd  *exec.Cmd
	// done is closed once Prism's output has been read to its end.
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	lines []string // log lines reporting a violation or an error
}

// startPrism starts Prism in front of upstream with the document at
// docPath and waits until it listens; the test's end stops it.
func startPrism(t *testing.T, upstream, docPath string, flags ...string) *prismProxy {
	t.Helper()
	addr := freeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	args := append([]string{"proxy", "--validate-request=false", "-h", host, "-p", port}, flags...)
	p := &prismProxy{base: "http://" + addr, done: make(chan struct{}),
		cmd: exec.Command(prismBin(t), append(args, docPath, upstream)...)}
	p.cmd.Env = append(os.Environ(), "SCARF_ANALYTICS=false", "NO_COLOR=1")
	// Its own process group, so that stopping it stops any process it forked.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop() })
	listening := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "Prism is listening") {
				once.Do(func() { close(listening) })
			}
			if strings.Contains(line, "Violation") || strings.Contains(line, "✖") {
				p.mu.Lock()
				p.lines = append(p.lines, line)
				p.mu.Unlock()
			}
		}
	}()
	select {
	case <-listening:
	case <-p.done:
		t.Fatal("Prism exited before it listened")
	case <-time.After(2 * time.Minute):
		t.Fatal("Prism did not start")
	}
	return p
}

// stop ends Prism and returns every violation and error line it logged:
// its output is read to the end first, so none is missed.
func (p *prismProxy) stop() []string {
	p.once.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		_ = p.cmd.Wait()
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// TestAnswersMatchTheOpenAPIDocument runs a `sandboxd server` behind
// Stoplight Prism, a third-party validator, as a proxy that checks every
// answer against the served OpenAPI document: status declared, body of
// the declared schema, enums respected. The requests walk the routes a
// control plane without nodes can answer, successes and errors alike.
func TestAnswersMatchTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	api, dataDir := freeAddr(t), filepath.Join(t.TempDir(), "s")
	start(t, nil, "server", "--data-dir", dataDir, "--api-addr", api, "--cluster-addr", freeAddr(t), "--raft-addr", freeAddr(t))
	direct := st.NewClient(t, "http://"+api, "")
	st.WaitFor(t, 30*time.Second, "the server to lead", func() bool {
		r, err := direct.DoErr("GET", "/healthz", nil)
		return err == nil && r.Status == 200
	})
	docPath := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(docPath, closedObjects(t, direct.Do("GET", "/api/openapi.json", nil).Must(t, 200).Raw), 0o600); err != nil {
		t.Fatal(err)
	}

	px := startPrism(t, "http://"+api, docPath, "--errors")
	base := px.base
	op := st.NewClient(t, base, readKey(t, filepath.Join(dataDir, "operator-token")))
	var answers []*st.Response
	do := func(c *st.Client, method, path string, body any, status int, header ...string) *st.Response {
		t.Helper()
		r := c.Do(method, path, body, header...)
		answers = append(answers, r)
		if r.Status != status {
			t.Errorf("%s %s: %d, want %d: %s", method, path, r.Status, status, r.Raw)
		}
		return r
	}
	do(op, "POST", "/api/admin/accounts", map[string]string{"email": "p@example.com", "plan": "paid"}, 201)
	do(op, "POST", "/api/admin/accounts", map[string]string{"email": "p@example.com", "plan": "paid"}, 409)
	do(op, "PUT", "/api/admin/accounts/nobody@example.com/plan", map[string]string{"plan": "free"}, 404)
	do(op, "PUT", "/api/admin/accounts/p@example.com/plan", map[string]string{"plan": "paid"}, 200)
	do(op, "GET", "/api/admin/accounts", nil, 200)
	do(op, "GET", "/api/admin/cluster", nil, 200)
	do(op, "GET", "/api/admin/outbox", nil, 200)
	secret := do(op, "POST", "/api/admin/tokens", map[string]string{"email": "p@example.com"}, 201).Str("secret")
	u := st.NewClient(t, base, secret)
	me := do(u, "GET", "/api/account/me", nil, 200)
	ws := me.Str("user.personalWorkspaceId")
	do(u, "GET", "/api/account/usage", nil, 200)
	do(u, "GET", "/api/account/tokens", nil, 200)
	tok := do(u, "POST", "/api/account/tokens", map[string]string{"name": "ci"}, 201, "Idempotency-Key", "p-1").Str("token.id")
	do(u, "POST", "/api/account/tokens", map[string]string{"name": "ci"}, 201, "Idempotency-Key", "p-1")
	do(u, "POST", "/api/account/tokens", map[string]string{"name": "other"}, 409, "Idempotency-Key", "p-1")
	do(u, "POST", "/api/account/tokens", map[string]string{"name": ""}, 400)
	do(u, "DELETE", "/api/account/tokens/"+tok, nil, 200)
	do(u, "DELETE", "/api/account/tokens/"+tok, nil, 404)
	do(u, "GET", "/api/account/invitations", nil, 200)
	do(u, "POST", "/api/account/invitations/inv_nope/accept", nil, 404)
	do(u, "GET", "/api/app/workspaces", nil, 200)
	team := do(u, "POST", "/api/app/workspaces", map[string]string{"name": "Team"}, 201).Str("workspace.id")
	do(u, "GET", "/api/app/workspaces/"+team, nil, 200, "X-Service-Workspace", team)
	do(u, "GET", "/api/app/workspaces/ws_nope", nil, 404, "X-Service-Workspace", "ws_nope")
	role := do(u, "POST", "/api/app/workspaces/"+ws+"/roles", map[string]any{"name": "viewer", "capabilities": []string{}}, 201).Str("role.id")
	do(u, "GET", "/api/app/workspaces/"+ws+"/roles", nil, 200)
	do(u, "PATCH", "/api/app/workspaces/"+ws+"/roles/"+role, map[string]string{"name": "reader"}, 200)
	inv := do(u, "POST", "/api/app/workspaces/"+ws+"/members", map[string]string{"email": "q@example.com"}, 201).Str("invitation.id")
	do(u, "GET", "/api/app/workspaces/"+ws+"/members", nil, 200)
	do(u, "GET", "/api/app/workspaces/"+ws+"/invitations", nil, 200)
	do(u, "DELETE", "/api/app/workspaces/"+ws+"/invitations/"+inv, nil, 200)
	do(u, "DELETE", "/api/app/workspaces/"+ws+"/roles/"+role, nil, 200)
	do(u, "GET", "/api/app/jobs/job_nope", nil, 404)
	do(u, "GET", "/api/app/sites", nil, 200)
	do(u, "POST", "/api/app/sites", map[string]string{"name": "no node yet"}, 503)
	do(u, "GET", "/api/app/sites/site_nope", nil, 404)
	do(u, "GET", "/api/app/sites/site_nope/debug", nil, 404)
	do(u, "GET", "/api/app/sites/site_nope/domain", nil, 404)
	do(u, "PUT", "/api/app/sites/site_nope/domain", map[string]string{"hostname": "shop.example.com"}, 404)
	do(u, "PUT", "/api/app/sites/site_nope/domain", map[string]any{"hostname": 7}, 400)
	do(u, "POST", "/api/app/sites/site_nope/domain/check", nil, 404)
	do(u, "DELETE", "/api/app/sites/site_nope/domain", nil, 404)
	do(u, "GET", "/api/app/sites/site_nope/ssh", nil, 404)
	do(u, "GET", "/api/app/sites/site_nope/repositories", nil, 404)
	do(u, "POST", "/api/app/sites/site_nope/repositories", map[string]string{"repoUrl": "https://git.example.com/a/b.git", "destination": "plugin"}, 404)
	do(u, "POST", "/api/app/sites/site_nope/repositories", map[string]string{"repoUrl": "https://git.example.com/a/b.git", "destination": "x", "more": "y"}, 400)
	do(u, "PATCH", "/api/app/sites/site_nope/repositories/repo_nope", map[string]string{"repoUrl": "x"}, 400)
	do(u, "PATCH", "/api/app/sites/site_nope/repositories/repo_nope", map[string]any{"autoDeploy": false}, 404)
	do(u, "POST", "/api/app/sites/site_nope/repositories/repo_nope/deploy", nil, 404)
	do(u, "DELETE", "/api/app/sites/site_nope/repositories/repo_nope", nil, 404)
	key := do(u, "POST", "/api/account/ssh-keys", map[string]string{"name": "prism",
		"publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII1v/zhA6DnYhabld1Co4wy0M8q0vKBv8ZVZql+JBbRp prism"}, 201).Str("sshKey.id")
	do(u, "POST", "/api/account/ssh-keys", map[string]string{"name": "bad", "publicKey": "ssh-dss AAAA"}, 400)
	do(u, "GET", "/api/account/ssh-keys", nil, 200)
	do(u, "DELETE", "/api/account/ssh-keys/"+key, nil, 200)
	do(u, "DELETE", "/api/account/ssh-keys/"+key, nil, 404)
	do(u, "POST", "/api/app/sites/site_nope/plugins", map[string]string{"libraryPlugin": "x"}, 404)
	do(u, "GET", "/api/app/plugin-library", nil, 200)
	body, ct := st.Multipart(map[string]string{"licenseKey": "PRISM-KEY-0001"}, "file", "p.zip", wpzip.BuildPlugin("prism-check", "Prism Check", "1.0", ""))
	// Prism's proxy re-encodes multipart bodies and breaks a ZIP in them:
	// the upload goes to the server directly.
	lib := direct.As(secret).Do("POST", "/api/app/plugin-library", body, "Content-Type", ct).Must(t, 201).Str("plugin.id")
	do(u, "GET", "/api/app/plugin-library/"+lib, nil, 200)
	do(u, "PUT", "/api/app/plugin-library/"+lib+"/license-key", map[string]string{"licenseKey": "PRISM-KEY-0002"}, 200)
	do(u, "DELETE", "/api/app/plugin-library/"+lib+"/license-key", nil, 200)
	do(u, "POST", "/api/app/plugin-library/"+lib+"/refresh", nil, 400)
	do(u, "DELETE", "/api/app/plugin-library/"+lib, nil, 200)
	do(u, "GET", "/api/app/plugin-library/"+lib, nil, 404)

	// Imports: the chunked protocol and its refusals (no node: the
	// restore is not reached), multipart in local mode.
	imp := do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 8}, 201).Str("import.id")
	do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": "ftp://x", "sizeBytes": 8}, 400)
	do(u, "GET", "/api/app/imports", nil, 200)
	do(u, "GET", "/api/app/imports/imp_nope", nil, 404)
	do(u, "PUT", "/api/app/imports/"+imp+"/upload", []byte("abcd"), 200, "Content-Type", "application/octet-stream", "X-Service-Offset", "0")
	do(u, "PUT", "/api/app/imports/"+imp+"/upload", []byte("efgh"), 409, "Content-Type", "application/octet-stream", "X-Service-Offset", "2")
	do(u, "POST", "/api/app/imports/"+imp+"/complete", nil, 400)
	do(u, "GET", "/api/app/imports/"+imp, nil, 200)
	do(u, "POST", "/api/app/imports/"+imp+"/multipart/init", map[string]any{"objects": []map[string]any{{"key": "a.tar", "sizeBytes": 8}}}, 400)
	do(u, "DELETE", "/api/app/imports/"+imp, nil, 200)
	do(u, "DELETE", "/api/app/imports/"+imp, nil, 409)
	imp2 := do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 8}, 201).Str("import.id")
	do(u, "POST", "/api/app/imports/"+imp2+"/multipart/init", map[string]any{"objects": []map[string]any{{"key": "a.tar", "sizeBytes": 8}}}, 200)
	do(u, "POST", "/api/app/imports/"+imp2+"/multipart/abort", nil, 200)
	do(u, "DELETE", "/api/app/imports/"+imp2+"?action=delete", nil, 200)
	// The connector's OAuth endpoints.
	anon := st.NewClient(t, base, "")
	do(anon, "POST", "/api/connect/register", map[string]any{"redirect_uris": []string{"https://live.example.com/cb"}, "client_name": "Prism"}, 201)
	do(anon, "POST", "/api/connect/register", map[string]any{"redirect_uris": []string{"http://live.example.com/cb"}}, 400)
	do(anon, "POST", "/api/connect/token", map[string]any{"grant_type": "authorization_code", "code": "x", "client_id": "y",
		"redirect_uri": "https://live.example.com/cb", "code_verifier": strings.Repeat("v", 43)}, 400)
	do(anon, "POST", "/api/connect/token", map[string]any{"grant_type": "client_credentials"}, 400)

	for _, r := range answers {
		if strings.Contains(string(r.Raw), "stoplight.io/prism/errors") {
			t.Errorf("Prism refused an answer: %s", r.Raw)
		}
	}
	for _, v := range px.stop() {
		t.Errorf("Prism: %s", v)
	}
	t.Logf("%d answers checked by Prism against the document", len(answers))
}

// docOperation is one operation of the served document: a method and a
// path template.
type docOperation struct {
	method, path string
	segs         []string
}

func (o docOperation) String() string { return o.method + " " + o.path }

// operationsOf lists a document's operations.
func operationsOf(t *testing.T, doc []byte) []docOperation {
	t.Helper()
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("the document: %v", err)
	}
	var ops []docOperation
	for path, item := range d.Paths {
		for m := range item {
			switch m {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				ops = append(ops, docOperation{method: strings.ToUpper(m), path: path, segs: strings.Split(strings.Trim(path, "/"), "/")})
			}
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].String() < ops[j].String() })
	if len(ops) == 0 {
		t.Fatal("the document has no operations")
	}
	return ops
}

// matches reports whether a request reaches the operation, and how many
// of the template's segments are literal: as in net/http, the most
// literal matching template is the one (…/blueprints/import before
// …/blueprints/{id}).
func (o docOperation) matches(method, path string) (bool, int) {
	if method != o.method {
		return false, 0
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	literal := 0
	for i, s := range o.segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "...}") {
			return len(segs) > i, literal
		}
		if i >= len(segs) {
			return false, 0
		}
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			if segs[i] == "" {
				return false, 0
			}
			continue
		}
		if s != segs[i] {
			return false, 0
		}
		literal++
	}
	return len(segs) == len(o.segs), literal
}

// routeWalk sends a test's requests through Prism, checks each answer
// and what Prism said about it, and records which of the document's
// operations they reached, so that the test can fail for every operation
// no answer of it was checked for.
type routeWalk struct {
	t     *testing.T
	prism *prismProxy
	ops   []docOperation
	// exempt names the operations Prism cannot proxy, with the reason:
	// their requests go around it (sendDirect).
	exempt   map[string]string
	viaPrism map[string]int
	direct   map[string]int
	answers  int
}

func newRouteWalk(t *testing.T, p *prismProxy, doc []byte, exempt map[string]string) *routeWalk {
	return &routeWalk{t: t, prism: p, ops: operationsOf(t, doc), exempt: exempt, viaPrism: map[string]int{}, direct: map[string]int{}}
}

// operation is the document's operation a request reaches.
func (w *routeWalk) operation(method, target string) string {
	w.t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, target, err)
	}
	best, bestLiteral := "", -1
	for _, o := range w.ops {
		if ok, literal := o.matches(method, u.Path); ok && literal > bestLiteral {
			best, bestLiteral = o.String(), literal
		}
	}
	if best == "" {
		w.t.Errorf("%s %s reaches no operation of the document", method, u.Path)
	}
	return best
}

// do sends a request through Prism and checks its status and
// that Prism found nothing wrong with the answer: no violation (the
// sl-violations header), no Prism error in its place.
func (w *routeWalk) do(c *st.Client, method, path string, body any, status int, header ...string) *st.Response {
	w.t.Helper()
	if !strings.HasPrefix(c.Base, w.prism.base) {
		w.t.Fatalf("%s %s: the client is not Prism's", method, path)
	}
	op := w.operation(method, path)
	r := c.Do(method, path, body, header...)
	w.viaPrism[op]++
	w.answers++
	if v := r.Header.Get("sl-violations"); v != "" {
		w.t.Errorf("%s %s (%s) answered %d; Prism: %s\n  answer: %.600s", method, path, op, r.Status, v, r.Raw)
	}
	if strings.Contains(string(r.Raw), "stoplight.io/prism/errors") {
		w.t.Errorf("%s %s (%s): Prism refused the answer: %s", method, path, op, r.Raw)
	}
	if r.Status != status {
		w.t.Errorf("%s %s: %d, want %d: %.600s", method, path, r.Status, status, r.Raw)
	}
	return r
}

// sendDirect sends a request of an exempt operation around Prism.
func (w *routeWalk) sendDirect(c *st.Client, method, path string, body any, status int, header ...string) *st.Response {
	w.t.Helper()
	if strings.HasPrefix(c.Base, w.prism.base) {
		w.t.Fatalf("%s %s: sendDirect with Prism's client", method, path)
	}
	op := w.operation(method, path)
	if _, ok := w.exempt[op]; !ok {
		w.t.Errorf("%s %s (%s) goes around Prism but is not exempt", method, path, op)
	}
	r := c.Do(method, path, body, header...)
	w.direct[op]++
	if r.Status != status {
		w.t.Errorf("%s %s: %d, want %d: %.600s", method, path, r.Status, status, r.Raw)
	}
	return r
}

// checkCoverage fails for every operation of the document that no
// request of the walk reached (through Prism, or around it when exempt),
// and for every exemption of an operation the document does not have.
func (w *routeWalk) checkCoverage() {
	w.t.Helper()
	known := map[string]bool{}
	var missing []string
	for _, o := range w.ops {
		k := o.String()
		known[k] = true
		if w.viaPrism[k] > 0 {
			continue
		}
		if _, ok := w.exempt[k]; ok && w.direct[k] > 0 {
			continue
		}
		missing = append(missing, k)
	}
	for k := range w.exempt {
		if !known[k] {
			w.t.Errorf("exempt from Prism: %s, which the document does not have", k)
		}
		if w.viaPrism[k] > 0 {
			w.t.Errorf("exempt from Prism: %s, which went through Prism: drop the exemption", k)
		}
	}
	if len(missing) > 0 {
		w.t.Errorf("%d of the document's %d operations got no answer checked by Prism (add them to the walk, or to its exemptions with the reason):\n  %s",
			len(missing), len(w.ops), strings.Join(missing, "\n  "))
	}
}

// closedObjects returns the document with every object schema that
// lists its properties closed to others (additionalProperties: false),
// unless it is one part of an allOf (a partial view of its object) or
// says otherwise. The served document leaves objects open so that
// clients tolerate new fields; Prism checking against the closed copy
// also flags a field an answer has and the document does not.
func closedObjects(t *testing.T, doc []byte) []byte {
	t.Helper()
	var d any
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	var walk func(v any, inAllOf bool)
	walk = func(v any, inAllOf bool) {
		switch x := v.(type) {
		case map[string]any:
			_, props := x["properties"]
			_, open := x["additionalProperties"]
			if x["type"] == "object" && props && !open && !inAllOf {
				x["additionalProperties"] = false
			}
			for k, c := range x {
				walk(c, k == "allOf")
			}
		case []any:
			for _, c := range x {
				walk(c, inAllOf)
			}
		}
	}
	walk(d, false)
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// blueprintSetName is the Blueprint the walk saves, runs, bakes and
// uploads: one step, no resource to fetch.
const blueprintSetName = `{"steps":[{"step":"setSiteOptions","options":{"blogname":"Prism blueprint"}}]}`

// TestEveryRouteThroughPrism puts Prism in front of a whole `sandboxd
// dev` system (a node agent on containerd, real WordPress, an object
// store for direct uploads) and walks every operation of the document it
// serves with at least one real answer: successes wherever one is
// possible (sites and their toolbox, each kind of site job, templates,
// restores, resets, Blueprints with their runs and a bake, imports by
// chunks and by direct upload restored into sites, a Git deploy,
// webhooks, workspaces and members, operator routes), refusals
// elsewhere. Prism checks the answers against the document with its
// objects closed (closedObjects), so a field the document lacks is
// flagged too. The test fails for any answer Prism flags and for any
// operation of the document no answer was checked for, so a new route
// cannot go unchecked.
func TestEveryRouteThroughPrism(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	started := time.Now()
	gitSrv := gittest.NewHTTPServer(t)
	gittest.NewRepo(t, gitSrv.Root, "prism-plugin", gitPlugin("1.0"))
	dns := dnstest.Start(t)
	var hookMu sync.Mutex
	var hooksGot int
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hookMu.Lock()
		hooksGot++
		hookMu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hooks.Close)
	bundle := zipOf(t, map[string]string{"blueprint.json": blueprintSetName})
	fileSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/blueprint.json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, blueprintSetName)
		case "/bundle.zip":
			w.Header().Set("Content-Type", "application/zip")
			_, _ = w.Write(bundle)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(fileSrv.Close)

	store, _ := objstoretest.Start(t)
	dir := devDataDir(t)
	d := launchWithEnv(t, []string{"SANDBOXD_IMPORT_STORE_ACCESS_KEY=" + store.AccessKey, "SANDBOXD_IMPORT_STORE_SECRET_KEY=" + store.SecretKey},
		dir, freeAddr(t), freeAddr(t), append(sharedContainerd(t), "--ssh-addr", "127.0.0.1:0", "--fetch-allow", "127.0.0.1/32",
			"--git-ca-file", gitSrv.CAFile, "--dns-resolver", dns.Addr, "--import-store", store.Endpoint, "--import-store-bucket", store.Bucket)...)
	doc := d.owner.Do("GET", "/api/openapi.json", nil).Must(t, 200).Raw
	docPath := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(docPath, closedObjects(t, doc), 0o600); err != nil {
		t.Fatal(err)
	}
	// Without --errors Prism passes every answer on and reports what it
	// finds in sl-violations and its log: the walk goes on with the real
	// answers and lists every mismatch of the run, not only the first.
	px := startPrism(t, d.owner.Base, docPath)
	w := newRouteWalk(t, px, doc, map[string]string{
		"POST /api/app/plugin-library": "its body is a ZIP in multipart/form-data: Prism's proxy re-encodes the body as text and breaks the ZIP",
	})
	operatorToken := readKey(t, filepath.Join(dir, "operator-token"))
	u := st.NewClient(t, px.base, d.owner.Token)
	op := st.NewClient(t, px.base, operatorToken)
	anon := st.NewClient(t, px.base, "")
	jobTypes := map[string]bool{}
	jobDone := func(id, want string) *st.Response {
		t.Helper()
		d.waitJob(t, id) // polled around Prism; its last state read through it
		r := w.do(u, "GET", "/api/app/jobs/"+id, nil, 200)
		jobTypes[r.Str("job.type")] = true
		if s := r.Str("job.status"); s != want {
			t.Errorf("job %s (%s) %s, want %s: %s", id, r.Str("job.type"), s, want, r.Raw)
		}
		return r
	}
	runDone := func(bp, id, want string) *st.Response {
		t.Helper()
		d.waitRun(t, bp, id)
		r := w.do(u, "GET", "/api/app/blueprints/"+bp+"/runs/"+id, nil, 200)
		if s := r.Str("run.status"); s != want {
			t.Errorf("run %s %s, want %s: %.2000s", id, s, want, r.Raw)
		}
		jobDone(r.Str("run.jobId"), want)
		return r
	}

	// Work for the node first; the routes that need none run meanwhile.
	w.do(u, "POST", "/api/app/sites", map[string]any{"phpVersion": "9.9"}, 400)
	a := w.do(u, "POST", "/api/app/sites", map[string]any{"name": "Prism A"}, 202, "Idempotency-Key", "prism-site-a")
	siteA, urlA := a.Str("site.id"), a.Str("site.url")
	w.do(u, "GET", "/api/app/jobs/"+a.Str("jobId"), nil, 200)
	w.do(u, "POST", "/api/app/blueprints/validate", map[string]any{"source": json.RawMessage(blueprintSetName)}, 200)
	w.do(anon, "POST", "/api/app/blueprints/validate", map[string]any{"source": json.RawMessage(blueprintSetName), "adapt": true}, 200)
	w.do(u, "POST", "/api/app/blueprints/validate", map[string]any{"source": 7}, 400)
	bp := w.do(u, "POST", "/api/app/blueprints", map[string]any{"name": "Prism", "source": json.RawMessage(blueprintSetName)}, 201).Str("blueprint.id")
	c := w.do(u, "POST", "/api/app/blueprints/"+bp+"/sites", map[string]any{"name": "Prism C"}, 202)
	siteC, runC := c.Str("site.id"), c.Str("run.id")
	bake := w.do(u, "POST", "/api/app/blueprints/"+bp+"/bake", map[string]any{"name": "Prism baked"}, 202)
	baked, bakeRun := bake.Str("template.id"), bake.Str("run.id")

	// Accounts, tokens, keys.
	w.do(u, "GET", "/api/account/me", nil, 200)
	w.do(u, "GET", "/api/account/usage", nil, 200)
	w.do(u, "GET", "/api/account/tokens", nil, 200)
	tok := w.do(u, "POST", "/api/account/tokens", map[string]any{"name": "prism", "expiresInDays": 1}, 201, "Idempotency-Key", "prism-token").Str("token.id")
	w.do(u, "POST", "/api/account/tokens", map[string]any{"name": "prism", "expiresInDays": 1}, 201, "Idempotency-Key", "prism-token")
	w.do(u, "POST", "/api/account/tokens", map[string]string{"name": "other"}, 409, "Idempotency-Key", "prism-token")
	w.do(u, "POST", "/api/account/tokens", map[string]string{"name": ""}, 400)
	w.do(u, "DELETE", "/api/account/tokens/"+tok, nil, 200)
	w.do(u, "DELETE", "/api/account/tokens/"+tok, nil, 404)
	_, pub := gittest.Keygen(t, t.TempDir(), "prism")
	key := w.do(u, "POST", "/api/account/ssh-keys", map[string]string{"name": "prism", "publicKey": strings.TrimSpace(string(pub))}, 201).Str("sshKey.id")
	w.do(u, "POST", "/api/account/ssh-keys", map[string]string{"name": "bad", "publicKey": "ssh-dss AAAA"}, 400)
	w.do(u, "GET", "/api/account/ssh-keys", nil, 200)

	// Operator routes.
	w.do(op, "GET", "/api/admin/accounts", nil, 200)
	bob := w.do(op, "POST", "/api/admin/accounts", map[string]string{"email": "bob@example.com", "plan": "free"}, 201)
	bobID := bob.Str("user.id")
	w.do(op, "POST", "/api/admin/accounts", map[string]string{"email": "bob@example.com", "plan": "free"}, 409)
	w.do(op, "PUT", "/api/admin/accounts/bob@example.com/plan", map[string]string{"plan": "paid"}, 200)
	w.do(op, "PUT", "/api/admin/accounts/nobody@example.com/plan", map[string]string{"plan": "paid"}, 404)
	bobTok := w.do(op, "POST", "/api/admin/tokens", map[string]string{"email": "bob@example.com", "name": "prism"}, 201).Str("secret")
	w.do(op, "POST", "/api/admin/tokens", map[string]string{"email": "nobody@example.com"}, 404)
	w.do(op, "GET", "/api/admin/cluster", nil, 200)
	w.do(op, "DELETE", "/api/admin/cluster/servers/srv_nope", nil, 404)
	w.do(op, "GET", "/api/admin/members", nil, 200)
	w.do(op, "DELETE", "/api/admin/members/agent/nope", nil, 404)
	w.do(op, "DELETE", "/api/admin/members/nobody/nope", nil, 400)
	jt := w.do(op, "POST", "/api/admin/join-tokens", map[string]any{"role": "agent", "name": "prism-agent", "ttlMinutes": 10}, 201).Str("joinToken.id")
	w.do(op, "POST", "/api/admin/join-tokens", map[string]any{"role": "agent", "ttlMinutes": -1}, 400)
	w.do(op, "GET", "/api/admin/join-tokens", nil, 200)
	w.do(op, "DELETE", "/api/admin/join-tokens/"+jt, nil, 200)
	w.do(op, "DELETE", "/api/admin/join-tokens/"+jt, nil, 200)
	ot := w.do(op, "POST", "/api/admin/operator-tokens", map[string]string{"name": "prism"}, 201).Str("operatorToken.id")
	w.do(op, "GET", "/api/admin/operator-tokens", nil, 200)
	w.do(op, "DELETE", "/api/admin/operator-tokens/"+ot, nil, 200)
	w.do(op, "DELETE", "/api/admin/operator-tokens/"+ot, nil, 404)
	w.do(op, "GET", "/api/admin/sealing-key", nil, 200)
	// One sealing key: nothing to rotate (a rotation needs every server
	// restarted with a second key).
	w.do(op, "POST", "/api/admin/sealing-key/rotate", map[string]any{"dryRun": true}, 409)
	nodes := w.do(op, "GET", "/api/admin/nodes", nil, 200).List("nodes")
	if len(nodes) != 1 {
		t.Fatalf("nodes: %v", nodes)
	}
	node, _ := nodes[0]["id"].(string)
	w.do(op, "GET", "/api/admin/nodes/"+node+"/drain", nil, 404)
	w.do(op, "POST", "/api/admin/nodes/node_nope/drain", nil, 404)

	// Workspaces, roles, members, invitations.
	w.do(u, "GET", "/api/app/workspaces", nil, 200)
	team := w.do(u, "POST", "/api/app/workspaces", map[string]string{"name": "Prism team"}, 201).Str("workspace.id")
	w.do(u, "POST", "/api/app/workspaces", map[string]string{"name": ""}, 400)
	ut := u.In(team)
	teamPath := "/api/app/workspaces/" + team
	w.do(ut, "GET", teamPath, nil, 200)
	w.do(u.In("ws_nope"), "GET", "/api/app/workspaces/ws_nope", nil, 404)
	role := w.do(ut, "POST", teamPath+"/roles", map[string]any{"name": "viewer", "capabilities": []string{}}, 201).Str("role.id")
	w.do(ut, "POST", teamPath+"/roles", map[string]any{"name": "bad", "capabilities": []string{"fly"}}, 400)
	w.do(ut, "GET", teamPath+"/roles", nil, 200)
	w.do(ut, "PATCH", teamPath+"/roles/"+role, map[string]string{"name": "reader"}, 200)
	inv := w.do(ut, "POST", teamPath+"/members", map[string]string{"email": "bob@example.com"}, 201).Str("invitation.id")
	w.do(ut, "GET", teamPath+"/invitations", nil, 200)
	b := st.NewClient(t, px.base, bobTok)
	w.do(b, "GET", "/api/account/invitations", nil, 200)
	w.do(b, "POST", "/api/account/invitations/"+inv+"/accept", nil, 200)
	w.do(b, "POST", "/api/account/invitations/"+inv+"/accept", nil, 409)
	w.do(ut, "GET", teamPath+"/members", nil, 200)
	w.do(ut, "PATCH", teamPath+"/members/"+bobID, map[string]any{"customRoleId": role}, 200)
	w.do(ut, "PATCH", teamPath+"/members/"+bobID, map[string]any{"customRoleId": "role_nope"}, 404)
	w.do(ut, "DELETE", teamPath+"/roles/"+role, nil, 409) // assigned to bob
	w.do(ut, "DELETE", teamPath+"/members/"+bobID, nil, 200)
	w.do(ut, "DELETE", teamPath+"/members/"+bobID, nil, 404)
	inv2 := w.do(ut, "POST", teamPath+"/members", map[string]string{"email": "carol@example.com"}, 201).Str("invitation.id")
	w.do(ut, "DELETE", teamPath+"/invitations/"+inv2, nil, 200)
	w.do(ut, "DELETE", teamPath+"/invitations/"+inv2, nil, 404)
	w.do(ut, "DELETE", teamPath+"/roles/"+role, nil, 200)
	w.do(op, "GET", "/api/admin/outbox", nil, 200)

	// The connector's OAuth endpoints: a registration and the refusals
	// a token exchange can meet without a browser.
	w.do(anon, "POST", "/api/connect/register", map[string]any{"redirect_uris": []string{"https://live.example.com/cb"}, "client_name": "Prism"}, 201)
	w.do(anon, "POST", "/api/connect/register", map[string]any{"redirect_uris": []string{"http://live.example.com/cb"}}, 400)
	w.do(anon, "POST", "/api/connect/token", map[string]any{"grant_type": "authorization_code", "code": "x", "client_id": "y",
		"redirect_uri": "https://live.example.com/cb", "code_verifier": strings.Repeat("v", 43)}, 400)
	w.do(anon, "POST", "/api/connect/token", map[string]any{"grant_type": "client_credentials"}, 400)

	// The demo-launch webhook, delivered to a local receiver.
	hookPath := "/api/account/webhooks/demo-launches"
	w.do(u, "GET", hookPath, nil, 200)
	w.do(u, "PUT", hookPath, map[string]any{"url": "ftp://x"}, 400)
	w.do(u, "PUT", hookPath, map[string]any{"url": hooks.URL + "/hook"}, 200)
	w.do(u, "POST", hookPath+"/test", nil, 200)
	w.do(u, "POST", hookPath+"/rotate-secret", nil, 200)
	w.do(u, "GET", hookPath, nil, 200)
	w.do(u, "DELETE", hookPath, nil, 200)
	w.do(u, "DELETE", hookPath, nil, 200)
	w.do(u, "POST", hookPath+"/test", nil, 400)
	hookMu.Lock()
	if hooksGot == 0 {
		t.Error("the webhook's test delivery did not arrive")
	}
	hookMu.Unlock()

	// Blueprints that need no node.
	w.do(u, "GET", "/api/app/blueprints", nil, 200)
	w.do(u, "GET", "/api/app/blueprints/"+bp, nil, 200)
	w.do(u, "GET", "/api/app/blueprints/bp_nope", nil, 404)
	w.do(u, "PATCH", "/api/app/blueprints/"+bp, map[string]any{"description": "Checked by Prism"}, 200)
	w.do(u, "POST", "/api/app/blueprints/import", map[string]string{"url": fileSrv.URL + "/blueprint.json"}, 200)
	w.do(u, "POST", "/api/app/blueprints/import", map[string]string{"url": "file:///etc/passwd"}, 400)
	// A bundle by URL: its multipart body is text, which Prism passes on.
	form, ct := st.Multipart(map[string]string{"bundleUrl": fileSrv.URL + "/bundle.zip", "name": "Prism bundle"}, "", "", nil)
	w.do(u, "POST", "/api/app/blueprints/upload?preview=1", form, 200, "Content-Type", ct)
	bundled := w.do(u, "POST", "/api/app/blueprints/upload", form, 201, "Content-Type", ct).Str("blueprint.id")
	w.do(u, "DELETE", "/api/app/blueprints/"+bundled, nil, 200)

	// The Library: a ZIP goes around Prism (see the exemption).
	direct := d.owner
	zipBody, zipCT := st.Multipart(map[string]string{"licenseKey": "PRISM-KEY-0001"}, "file", "prism-check.zip",
		wpzip.BuildPlugin("prism-check", "Prism Check", "1.0", `add_action('wp_footer', function () { echo '<p>prism-check</p>'; });`))
	lib := w.sendDirect(direct, "POST", "/api/app/plugin-library", zipBody, 201, "Content-Type", zipCT).Str("plugin.id")
	w.do(u, "GET", "/api/app/plugin-library", nil, 200)
	w.do(u, "GET", "/api/app/plugin-library/"+lib, nil, 200)
	w.do(u, "GET", "/api/app/plugin-library/plg_nope", nil, 404)
	w.do(u, "PUT", "/api/app/plugin-library/"+lib+"/license-key", map[string]string{"licenseKey": "PRISM-KEY-0002"}, 200)
	w.do(u, "POST", "/api/app/plugin-library/"+lib+"/refresh", nil, 400)
	w.do(u, "POST", "/api/app/plugin-library/github", map[string]string{"repository": "not a repository"}, 400)
	w.do(u, "POST", "/mcp", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]string{"name": "prism", "version": "1"}}},
		200, "Accept", "application/json, text/event-stream")

	// Site A: its toolbox.
	jobDone(a.Str("jobId"), "succeeded")
	w.do(u, "GET", "/api/app/sites", nil, 200)
	w.do(u, "GET", "/api/app/sites/"+siteA, nil, 200)
	w.do(u, "GET", "/api/app/sites/site_nope", nil, 404)
	w.do(u, "POST", "/api/sites/"+siteA+"/magic-login", nil, 200)
	w.do(u, "POST", "/api/sites/site_nope/magic-login", nil, 404)
	w.do(u, "GET", "/api/app/sites/"+siteA+"/ssh", nil, 200)
	w.do(u, "GET", "/api/app/sites/"+siteA+"/database", nil, 200)
	fm := "/api/app/sites/" + siteA + "/files"
	enc := sitepath.Encode
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	w.do(u, "POST", fm+"/write?path="+enc("wp-content/prism/hello.txt"), map[string]string{"contentBase64": b64("hello")}, 200)
	w.do(u, "GET", fm+"?path="+enc("wp-content/prism"), nil, 200)
	w.do(u, "GET", fm, nil, 200)
	w.do(u, "GET", fm+"/content?path="+enc("wp-content/prism/hello.txt"), nil, 200)
	w.do(u, "GET", fm+"/content?path="+enc("wp-content/prism/nope.txt"), nil, 404)
	w.do(u, "POST", fm+"/mkdir?path="+enc("wp-content/prism/sub"), nil, 200)
	w.do(u, "POST", fm+"/copy?from="+enc("wp-content/prism/hello.txt")+"&to="+enc("wp-content/prism/sub/copy.txt"), nil, 200)
	w.do(u, "POST", fm+"/rename?from="+enc("wp-content/prism/sub/copy.txt")+"&to="+enc("wp-content/prism/moved.txt"), nil, 200)
	w.do(u, "POST", fm+"/rename?from="+enc("wp-content/prism/hello.txt")+"&to="+enc("wp-content/prism/moved.txt"), nil, 409)
	up, upCT := st.Multipart(nil, "file", "upload.txt", []byte("uploaded through Prism"))
	w.do(u, "POST", fm+"/upload?path="+enc("wp-content/prism"), up, 200, "Content-Type", upCT)
	w.do(u, "POST", fm+"/write?path="+enc("../escape.txt"), map[string]string{"contentBase64": b64("x")}, 400)
	w.do(u, "POST", fm+"/delete?path="+enc("wp-content/prism"), nil, 200)
	// The debug log and the mail catcher, with a real warning and a real mail.
	dbg := "/api/app/sites/" + siteA + "/debug"
	w.do(u, "GET", dbg, nil, 200)
	w.do(u, "PUT", dbg, map[string]bool{"wpDebug": true, "wpDebugLog": true}, 200)
	w.do(u, "PUT", dbg, map[string]any{"wpDebug": "yes"}, 400)
	d.putFile(t, siteA, "prism-warn.php", `<?php require __DIR__.'/wp-load.php'; trigger_error("prism-warning", E_USER_WARNING); echo 'ok';`)
	d.putFile(t, siteA, "prism-mail.php", `<?php require __DIR__.'/wp-load.php'; echo wp_mail('dev@example.com', 'Prism mail', 'Body') ? 'sent' : 'failed';`)
	for _, page := range []string{"/prism-warn.php", "/prism-mail.php"} {
		if code, body := served(t, urlA+page); code != 200 {
			t.Fatalf("%s: %d %.300s", page, code, body)
		}
	}
	w.do(u, "GET", dbg+"/log", nil, 200)
	w.do(u, "GET", dbg+"/log?lines=1", nil, 200)
	w.do(u, "DELETE", dbg+"/log", nil, 200)
	w.do(u, "PUT", dbg, map[string]bool{"wpDebug": false}, 200)
	w.do(u, "GET", "/api/app/sites/"+siteA+"/email", nil, 200)
	w.do(u, "DELETE", "/api/app/sites/"+siteA+"/email", nil, 200)
	// PHP settings and versions: a job each, one that fails.
	pc := w.do(u, "PUT", "/api/app/sites/"+siteA+"/php-config", map[string]any{"settings": map[string]any{"memory_limit": "256M", "max_input_vars": 2000}}, 202)
	jobDone(pc.Str("jobId"), "succeeded")
	w.do(u, "PUT", "/api/app/sites/"+siteA+"/php-config", map[string]any{"settings": map[string]any{"disable_functions": ""}}, 400)
	w.do(u, "GET", "/api/app/sites/"+siteA+"/php-config", nil, 200)
	pv := w.do(u, "PUT", "/api/app/sites/"+siteA+"/php-version", map[string]string{"phpVersion": "8.4"}, 202)
	jobDone(pv.Str("jobId"), "succeeded")
	pv = w.do(u, "PUT", "/api/app/sites/"+siteA+"/php-version", map[string]string{"phpVersion": "8.1"}, 202)
	jobDone(pv.Str("jobId"), "failed")
	w.do(u, "PUT", "/api/app/sites/"+siteA+"/php-version", map[string]string{"phpVersion": "abc"}, 400)
	// An agent's toolkit: PHP, SQL, a screenshot, a checkpoint restored,
	// a fork.
	w.do(u, "POST", "/api/app/sites/"+siteA+"/php", map[string]any{"code": "<?php echo 6 * 7;"}, 200)
	w.do(u, "POST", "/api/app/sites/"+siteA+"/php", map[string]any{"code": ""}, 400)
	w.do(u, "POST", "/api/app/sites/"+siteA+"/sql", map[string]any{"query": "SELECT option_name, NULL FROM wp_options LIMIT 2"}, 200)
	w.do(u, "POST", "/api/app/sites/"+siteA+"/sql", map[string]any{"query": "SELECT * FROM mysql.user"}, 400)
	w.do(u, "POST", "/api/app/sites/"+siteA+"/screenshot", map[string]any{"width": 640, "height": 480}, 200)
	w.do(u, "POST", "/api/app/sites/"+siteA+"/screenshot", map[string]any{"path": "//elsewhere"}, 400)
	cp := w.do(u, "POST", "/api/app/sites/"+siteA+"/checkpoints", map[string]any{"name": "prism"}, 201).Str("checkpoint.id")
	w.do(u, "GET", "/api/app/sites/"+siteA+"/checkpoints", nil, 200)
	jobDone(w.do(u, "POST", "/api/app/sites/"+siteA+"/checkpoints/"+cp+"/restore", nil, 202).Str("jobId"), "succeeded")
	w.do(u, "POST", "/api/app/sites/"+siteA+"/checkpoints/cp_nope0000/restore", nil, 404)
	w.do(u, "DELETE", "/api/app/sites/"+siteA+"/checkpoints/"+cp, nil, 200)
	w.do(u, "DELETE", "/api/app/sites/"+siteA+"/checkpoints/"+cp, nil, 404)
	fork := w.do(u, "POST", "/api/app/sites/"+siteA+"/fork", map[string]any{"name": "Prism fork"}, 202)
	jobDone(fork.Str("jobId"), "succeeded")
	jobDone(w.do(u, "DELETE", "/api/app/sites/"+fork.Str("site.id"), nil, 202).Str("jobId"), "succeeded")
	// A plugin from the Library.
	dep := w.do(u, "POST", "/api/app/sites/"+siteA+"/plugins", map[string]any{"libraryPlugin": "prism-check", "activate": true}, 202)
	jobDone(dep.Str("jobId"), "succeeded")
	w.do(u, "POST", "/api/app/sites/"+siteA+"/plugins", map[string]any{"libraryPlugin": "nope"}, 404)
	w.do(u, "GET", "/api/app/sites/"+siteA+"/plugins", nil, 200)
	w.do(u, "DELETE", "/api/app/plugin-library/"+lib+"/license-key", nil, 200)
	// An operator's snapshot.
	snap := w.do(op, "POST", "/api/app/sites/"+siteA+"/snapshot", nil, 202)
	jobDone(snap.Str("jobId"), "succeeded")
	w.do(op, "GET", "/api/admin/sites/"+siteA+"/snapshots", nil, 200)
	w.do(op, "GET", "/api/admin/sites/site_nope/snapshots", nil, 404)

	// A template of A (a snapshot_template job), a site from it, a
	// restore of A to it and a reset of the template's site.
	w.do(u, "POST", "/api/app/templates", map[string]any{"siteId": siteA}, 400)
	tm := w.do(u, "POST", "/api/app/templates", map[string]any{"siteId": siteA, "name": "Prism template", "description": "Checked by Prism"}, 202)
	tpl := tm.Str("template.id")
	if j := jobDone(tm.Str("jobId"), "succeeded"); j.Str("job.type") != "snapshot_template" {
		t.Errorf("the template's job: %s", j.Raw)
	}
	w.do(u, "GET", "/api/app/templates", nil, 200)
	w.do(u, "GET", "/api/app/templates/"+tpl, nil, 200)
	w.do(u, "GET", "/api/app/templates/tpl_nope", nil, 404)
	w.do(u, "PATCH", "/api/app/templates/"+tpl, map[string]any{"launchEnabled": true, "launchEntryMode": "email", "warmPoolSize": 0}, 200)
	w.do(u, "PATCH", "/api/app/templates/"+tpl, map[string]any{"launchEntryMode": "carrier-pigeon"}, 400)
	w.do(u, "GET", "/api/app/templates/"+tpl+"/leads", nil, 200)
	bs := w.do(u, "POST", "/api/app/templates/"+tpl+"/sites", map[string]any{"name": "Prism B"}, 202)
	siteB := bs.Str("site.id")
	jobDone(bs.Str("jobId"), "succeeded")
	rs := w.do(u, "POST", "/api/app/sites/"+siteA+"/restore", map[string]any{"templateId": tpl}, 202)
	jobDone(rs.Str("jobId"), "succeeded")
	w.do(u, "POST", "/api/app/sites/"+siteA+"/restore", map[string]any{"templateId": "tpl_nope"}, 404)
	rb := w.do(u, "POST", "/api/app/sites/"+siteB+"/reset", nil, 202)
	jobDone(rb.Str("jobId"), "succeeded")

	// Blueprint runs: C made from one, the Blueprint applied to A, a bake.
	runDone(bp, runC, "succeeded")
	applied := w.do(u, "POST", "/api/app/sites/"+siteA+"/blueprint", map[string]any{"blueprintId": bp}, 202)
	runDone(bp, applied.Str("run.id"), "succeeded")
	w.do(u, "POST", "/api/app/sites/"+siteA+"/blueprint", map[string]any{"source": `{"steps":[{"step":"instalPlugin"}]}`}, 400)
	w.do(u, "GET", "/api/app/blueprints/"+bp+"/runs", nil, 200)
	w.do(u, "GET", "/api/app/blueprints/"+bp+"/runs/run_nope", nil, 404)
	runDone(bp, bakeRun, "succeeded")
	st.WaitFor(t, 3*time.Minute, "the baked template", func() bool {
		return d.owner.Do("GET", "/api/app/templates/"+baked, nil).Must(t, 200).Str("template.status") != "building"
	})
	w.do(u, "GET", "/api/app/templates/"+baked, nil, 200)

	// Imports of C's own database and a file, as an uncompressed tar (a
	// text body, which Prism passes on unchanged): uploaded in two chunks
	// and restored into C in place; then as two objects uploaded straight
	// to the object store and restored into B.
	urlC := d.owner.Do("GET", "/api/app/sites/"+siteC, nil).Must(t, 200).Str("site.url")
	sqlDump := dump(t, d.dbAccess(t, siteC))
	files := tarOf(t, []entry{{name: "wp-content/uploads/prism.txt", body: "imported"}})
	archive := tarOf(t, []entry{{name: "backup.sql", body: string(sqlDump)}, {name: "wp-content/uploads/prism.txt", body: "imported"}})
	if !utf8.Valid(archive) {
		t.Fatal("the archive is not UTF-8 text: Prism would re-encode it")
	}
	half := len(archive) / 2
	for archive[half]&0xC0 == 0x80 { // not inside a character
		half++
	}
	waitImport := func(path string) {
		t.Helper()
		var got *st.Response
		st.WaitFor(t, 3*time.Minute, path, func() bool {
			got = d.owner.Do("GET", path, nil).Must(t, 200)
			return got.Str("import.status") == "ready" || got.Str("import.status") == "failed"
		})
		if got.Str("import.status") != "ready" {
			t.Errorf("import: %s", got.Raw)
		}
		jobDone(got.Str("import.jobId"), "succeeded")
		w.do(u, "GET", path, nil, 200)
	}
	w.do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": "ftp://x", "sizeBytes": 8}, 400)
	imp := w.do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": urlC, "siteId": siteC, "sizeBytes": len(archive)}, 201).Str("import.id")
	impPath := "/api/app/imports/" + imp
	w.do(u, "POST", impPath+"/multipart/init", map[string]any{"objects": []map[string]any{{"key": "a.tar", "sizeBytes": len(archive)}}}, 200)
	w.do(u, "POST", impPath+"/multipart/abort", nil, 200)
	w.do(u, "DELETE", impPath, nil, 409)
	w.do(u, "DELETE", impPath+"?action=delete", nil, 200)
	imp = w.do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": urlC, "siteId": siteC, "sizeBytes": len(archive)}, 201).Str("import.id")
	impPath = "/api/app/imports/" + imp
	w.do(u, "PUT", impPath+"/upload", archive[:half], 200, "Content-Type", "application/octet-stream", "X-Service-Offset", "0")
	w.do(u, "PUT", impPath+"/upload", archive[half:], 409, "Content-Type", "application/octet-stream", "X-Service-Offset", "1")
	w.do(u, "GET", impPath, nil, 200)
	w.do(u, "PUT", impPath+"/upload", archive[half:], 200, "Content-Type", "application/octet-stream", "X-Service-Offset", strconv.Itoa(half))
	w.do(u, "POST", impPath+"/complete", nil, 202)
	w.do(u, "GET", impPath, nil, 200)
	waitImport(impPath)
	imp2 := w.do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": urlC, "siteId": siteB, "sizeBytes": len(sqlDump) + len(files)}, 201).Str("import.id")
	mp := "/api/app/imports/" + imp2 + "/multipart/"
	w.do(u, "POST", mp+"init", map[string]any{"objects": []map[string]any{{"key": "files.tar", "sizeBytes": len(files)}, {"key": "../db.sql", "sizeBytes": len(sqlDump)}}}, 400)
	if r := w.do(u, "POST", mp+"init", map[string]any{"objects": []map[string]any{{"key": "files.tar", "sizeBytes": len(files)},
		{"key": "db.sql", "sizeBytes": len(sqlDump)}}}, 200); r.Str("mode") != "direct" {
		t.Errorf("multipart init: %s", r.Raw)
	}
	w.do(u, "POST", mp+"part-url", map[string]any{"key": "other.tar", "partNumber": 1}, 400)
	for key, data := range map[string][]byte{"files.tar": files, "db.sql": sqlDump} {
		partURL := w.do(u, "POST", mp+"part-url", map[string]any{"key": key, "partNumber": 1}, 200).Str("url")
		req, err := http.NewRequest("PUT", partURL, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("part upload to the object store: %d", resp.StatusCode)
		}
		w.do(u, "POST", mp+"complete-object", map[string]any{"key": key}, 200)
	}
	w.do(u, "POST", mp+"finalize", map[string]any{"manifest": map[string]any{"objects": []map[string]any{{"key": "db.sql", "kind": "exe"}}}}, 400)
	w.do(u, "POST", mp+"finalize", map[string]any{"manifest": map[string]any{"objects": []map[string]any{
		{"key": "db.sql", "kind": "sql"}, {"key": "files.tar", "kind": "archive"}}}}, 202)
	waitImport("/api/app/imports/" + imp2)
	w.do(u, "GET", "/api/app/imports", nil, 200)
	w.do(u, "GET", "/api/app/imports/imp_nope", nil, 404)
	w.do(u, "DELETE", impPath+"?action=delete", nil, 200)
	w.do(u, "DELETE", "/api/app/imports/"+imp2+"?action=delete", nil, 200)

	// A Git repository on A, deployed.
	repos := "/api/app/sites/" + siteA + "/repositories"
	w.do(u, "POST", repos, map[string]any{"repoUrl": "https://git.example.com/a/b.git", "destination": "garden"}, 400)
	repo := w.do(u, "POST", repos, map[string]any{"repoUrl": gitSrv.URL("127.0.0.1", "prism-plugin"), "destination": "plugin", "branch": "main"}, 201).Str("repository.id")
	w.do(u, "GET", repos, nil, 200)
	w.do(u, "PATCH", repos+"/"+repo, map[string]any{"autoDeploy": false}, 200)
	w.do(u, "PATCH", repos+"/"+repo, map[string]any{"repoUrl": "https://127.0.0.1/other.git"}, 400)
	dj := w.do(u, "POST", repos+"/"+repo+"/deploy", nil, 202)
	jobDone(dj.Str("jobId"), "succeeded")
	w.do(u, "DELETE", repos+"/"+repo, nil, 200)
	w.do(u, "DELETE", repos+"/"+repo, nil, 404)
	w.do(u, "POST", repos+"/repo_nope/deploy", nil, 404)

	// A custom domain: its records wrong (pending_dns), then right (a job
	// moves WordPress to it), then disconnected (a job moves it back).
	dom := "/api/app/sites/" + siteA + "/domain"
	w.do(u, "GET", dom, nil, 200)
	w.do(u, "PUT", dom, map[string]any{"hostname": "not a host"}, 400)
	w.do(u, "PUT", dom, map[string]any{"hostname": "shop.example.com"}, 200)
	dns.Set(t, "shop.example.com", "A 127.0.0.1")
	w.do(u, "POST", dom+"/check", nil, 200)
	sandboxHost, _, _ := strings.Cut(strings.TrimPrefix(urlA, "http://"), ":")
	dns.Set(t, sandboxHost, "A 127.0.0.1")
	dns.Set(t, "shop.example.com", "CNAME "+sandboxHost+".")
	if j := w.do(u, "POST", dom+"/check", nil, 200).Str("jobId"); j != "" {
		jobDone(j, "succeeded")
	} else {
		t.Error("a domain whose records are right started no job")
	}
	w.do(u, "GET", dom, nil, 200)
	if j := w.do(u, "DELETE", dom, nil, 200).Str("jobId"); j != "" {
		jobDone(j, "succeeded")
	} else {
		t.Error("disconnecting an active domain started no job")
	}
	w.do(u, "DELETE", dom, nil, 400)
	w.do(u, "POST", dom+"/check", nil, 400)

	// The end: the sites, templates, Blueprint, Library entry and key go;
	// the node, empty, drains and stops draining.
	for _, id := range []string{siteA, siteB, siteC} {
		del := w.do(u, "DELETE", "/api/app/sites/"+id, nil, 202)
		jobDone(del.Str("jobId"), "succeeded")
	}
	w.do(u, "DELETE", "/api/app/sites/"+siteA, nil, 404)
	w.do(u, "DELETE", "/api/app/templates/"+tpl, nil, 200)
	w.do(u, "DELETE", "/api/app/templates/"+baked, nil, 200)
	w.do(u, "DELETE", "/api/app/templates/"+tpl, nil, 404)
	w.do(u, "DELETE", "/api/app/blueprints/"+bp, nil, 200)
	w.do(u, "DELETE", "/api/app/plugin-library/"+lib, nil, 200)
	w.do(u, "DELETE", "/api/account/ssh-keys/"+key, nil, 200)
	w.do(u, "DELETE", "/api/account/ssh-keys/"+key, nil, 404)
	w.do(u, "GET", "/api/app/jobs/job_nope", nil, 404)
	w.do(op, "POST", "/api/admin/nodes/"+node+"/drain", nil, 200)
	w.do(op, "GET", "/api/admin/nodes/"+node+"/drain", nil, 200)
	w.do(op, "DELETE", "/api/admin/nodes/"+node+"/drain", nil, 200)
	w.do(u, "GET", "/api/app/sites", nil, 200)

	w.checkCoverage()
	if lines := px.stop(); len(lines) > 0 {
		// Each violation was reported with its request above (its
		// sl-violations header); the log is the backstop.
		for _, l := range lines {
			t.Logf("Prism: %s", l)
		}
		if !t.Failed() {
			t.Errorf("Prism logged %d violations or errors that no answer carried", len(lines))
		}
	}
	t.Logf("%d answers checked by Prism, %d of %d operations through it (%d exempt), jobs of types %v, in %s",
		w.answers, len(w.viaPrism), len(w.ops), len(w.exempt), slices.Sorted(maps.Keys(jobTypes)), time.Since(started).Round(time.Second))
}
