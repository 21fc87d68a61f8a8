package blueprintrun

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// gitRepo makes a repository with a plugin in a subdirectory and a tag,
// served over git's dumb HTTP protocol by a plain file server.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed (deploy/dev/install-deps.sh installs it)")
	}
	work := t.TempDir()
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
			"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	run(work, "init", "-q", "-b", "main", ".")
	os.MkdirAll(filepath.Join(work, "plugins", "hello"), 0o755)
	os.WriteFile(filepath.Join(work, "plugins", "hello", "hello.php"), []byte("<?php /* Plugin Name: Hello v1 */"), 0o644)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("readme"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(work, "plugins", "hello", "leak"))
	os.Symlink("/", filepath.Join(work, "up"))
	run(work, "add", "-A")
	run(work, "commit", "-qm", "v1")
	run(work, "tag", "v1")
	os.WriteFile(filepath.Join(work, "plugins", "hello", "hello.php"), []byte("<?php /* Plugin Name: Hello v2 */"), 0o644)
	run(work, "commit", "-qam", "v2")
	bare := filepath.Join(t.TempDir(), "repo.git")
	run(work, "clone", "-q", "--bare", work, bare)
	run(bare, "update-server-info")
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(bare))))
	t.Cleanup(srv.Close)
	return srv.URL + "/repo.git"
}

func TestGitDirectory(t *testing.T) {
	u := gitRepo(t)
	// The pin leads git to the test server whatever the URL's host says.
	srv := strings.TrimPrefix(u, "http://")
	srv = srv[:strings.Index(srv, "/")]
	res := &resolver{r: New(Config{GitURL: func(_ context.Context, raw string) (string, string, error) {
		if strings.Contains(raw, "forbidden") {
			return "", "", errors.New("refused by the address guard")
		}
		_, port, _ := strings.Cut(srv, ":")
		return strings.Replace(raw, srv, "repo.example:"+port, 1), "repo.example:" + port + ":127.0.0.1", nil
	}}), run: &state.BlueprintRun{}}
	ctx := context.Background()
	for _, tc := range []struct {
		ref, refType, path string
		want               string
	}{
		{"main", "branch", "plugins/hello", "v2"},
		{"v1", "tag", "plugins/hello", "v1"},
		{"main", "", "", "v2"},
	} {
		files, name, err := res.git(ctx, u, tc.ref, tc.refType, tc.path)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		key := "hello.php"
		if tc.path == "" {
			key = "plugins/hello/hello.php"
			if name != "repo" {
				t.Errorf("name %q", name)
			}
		} else if name != "hello" {
			t.Errorf("name %q", name)
		}
		if !strings.Contains(string(files[key]), "Hello "+tc.want) {
			t.Errorf("%+v: %q in %v", tc, files[key], keys(files))
		}
		for k := range files {
			if strings.HasPrefix(k, ".git") || strings.HasSuffix(k, "leak") {
				t.Errorf("%+v: %s came along", tc, k)
			}
		}
	}
	for _, tc := range []struct{ url, ref, path string }{
		{u, "no-such-branch", ""}, {u, "--upload-pack=touch /tmp/x", ""}, {"https://forbidden.example/repo.git", "main", ""},
		// A link in the middle of the path leads nowhere: nothing of the
		// host's is read.
		{u, "main", "up/etc"}, {u, "main", "up"}, {u, "main", "../../etc"},
	} {
		if files, _, err := res.git(ctx, tc.url, tc.ref, "branch", tc.path); err == nil {
			t.Errorf("%v: no error, %d files", tc, len(files))
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestResources: each resource type becomes a reference to a blob the
// node reads (or a site path); a bundle serves its files, never one
// outside it; directories and zips are built from their parts.
func TestResources(t *testing.T) {
	var bundle bytes.Buffer
	zw := zip.NewWriter(&bundle)
	for name, c := range map[string]string{"shop/blueprint.json": `{"steps":[]}`, "shop/theme.zip": "THEME", "shop/data/content.xml": "<rss/>"} {
		w, _ := zw.Create(name)
		io.WriteString(w, c)
	}
	zw.Close()
	fetched := map[string]bool{}
	r := New(Config{
		Store: state.NewStore(),
		Fetch: func(_ context.Context, u string, _ int64) ([]byte, error) {
			fetched[u] = true
			if strings.Contains(u, "missing") {
				return nil, errors.New("404 Not Found")
			}
			return []byte("body of " + u), nil
		},
		Blob: func(context.Context, string) ([]byte, error) { return bundle.Bytes(), nil },
	})
	res := &resolver{r: r, run: &state.BlueprintRun{BundleSHA256: "sha"}}
	ctx := context.Background()
	for _, tc := range []struct {
		in      string
		want    string // the reference, as fmt prints it
		blob    string // the first blob
		wantErr string
	}{
		{`{"resource":"url","url":"https://example.com/a/b.zip"}`, "map[$file:0 name:b.zip]", "body of https://example.com/a/b.zip", ""},
		{`{"resource":"wordpress.org/plugins","slug":"hello-dolly"}`, "map[$file:0 name:hello-dolly.zip]", "body of https://downloads.wordpress.org/plugin/hello-dolly.zip", ""},
		{`{"resource":"wordpress.org/themes","slug":"twentytwentyfour"}`, "map[$file:0 name:twentytwentyfour.zip]", "body of https://downloads.wordpress.org/theme/twentytwentyfour.zip", ""},
		{`{"resource":"vfs","path":"/wordpress/x.txt"}`, "map[$vfs:/wordpress/x.txt]", "", ""},
		{`{"resource":"literal","name":"a.txt","contents":"hi"}`, "map[$file:0 name:a.txt]", "hi", ""},
		{`{"resource":"bundled","path":"./theme.zip"}`, "map[$file:0 name:theme.zip]", "THEME", ""},
		{`{"resource":"bundled","path":"data/content.xml"}`, "map[$file:0 name:content.xml]", "<rss/>", ""},
		{`{"resource":"bundled","path":"../shop/theme.zip"}`, "", "", "leaves the bundle"},
		{`{"resource":"bundled","path":"nope.zip"}`, "", "", "no file"},
		{`{"resource":"literal:directory","name":"kit","files":{"a.php":"A","sub":{"b.php":"B"}}}`, "map[$dir:map[files:map[a.php:0 sub/b.php:1] name:kit]]", "A", ""},
		{`{"resource":"literal:directory","name":"kit","files":{"../x":"A"}}`, "", "", "bad file name"},
		{`{"resource":"url","url":"https://example.com/missing.zip"}`, "", "", "404"},
	} {
		var v map[string]any
		if err := jsonUnmarshal(tc.in, &v); err != nil {
			t.Fatal(err)
		}
		p := &prepared{extras: map[string]any{}}
		ref, err := res.resource(ctx, p, "x", v)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got := fmt.Sprint(ref); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.in, got, tc.want)
		}
		if tc.blob != "" && string(p.blobs[0]) != tc.blob {
			t.Errorf("%s: blob %q", tc.in, p.blobs[0])
		}
	}

	// A zip resource wraps a file into a ZIP the node unpacks.
	p := &prepared{extras: map[string]any{}}
	var v map[string]any
	jsonUnmarshal(`{"resource":"zip","name":"kit.zip","inner":{"resource":"literal:directory","name":"kit","files":{"kit.php":"K"}}}`, &v)
	if _, err := res.resource(ctx, p, "x", v); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(p.blobs[0]), int64(len(p.blobs[0])))
	if err != nil || len(zr.File) != 1 || zr.File[0].Name != "kit.php" {
		t.Fatalf("zip resource: %v %v", err, zr)
	}

	// wp-cli arguments are split without a shell, and what they install
	// is fetched.
	p = &prepared{args: map[string]any{"command": `wp plugin install akismet https://example.com/x.zip --activate; rm -rf /`}, extras: map[string]any{}}
	if err := res.wpCLI(ctx, p); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p.args["argv"]) != "[plugin install akismet https://example.com/x.zip --activate; rm -rf /]" ||
		!fetched["https://downloads.wordpress.org/plugin/akismet.zip"] || !fetched["https://example.com/x.zip"] {
		t.Fatalf("wp-cli: %v %v", p.args["argv"], fetched)
	}
	// Attachments named by a WXR are fetched; one that cannot be is noted.
	p = &prepared{extras: map[string]any{}}
	wxr := `<rss><item><wp:attachment_url><![CDATA[https://example.com/a.jpg]]></wp:attachment_url></item>
	  <item><wp:attachment_url>https://example.com/missing.jpg</wp:attachment_url></item></rss>`
	i, _ := p.add([]byte(wxr))
	p.args = map[string]any{"file": map[string]any{"$file": i}}
	if err := res.attachments(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := p.extras["attachments"].(map[string]int); len(got) != 1 || got["https://example.com/a.jpg"] != 1 ||
		!strings.Contains(res.notes(), "missing.jpg not fetched") {
		t.Fatalf("attachments: %v", p.extras)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
