package sites_test

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// tree is a tar of files (path → content; paths ending in ".sh" are
// executable) under prefix/ when prefix is set, with their directories,
// the way gitdeploy's Tree.WriteTar writes one.
func tree(t *testing.T, prefix string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	dir := func(d string) {
		if !dirs[d] {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(1e9, 0)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if prefix != "" {
		dir(prefix)
	}
	for _, n := range names {
		full := n
		if prefix != "" {
			full = prefix + "/" + n
		}
		parts := strings.Split(full, "/")
		for i := 1; i < len(parts); i++ {
			dir(strings.Join(parts[:i], "/"))
		}
		mode := int64(0o644)
		if strings.HasSuffix(n, ".sh") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: full, Mode: mode, Size: int64(len(files[n])), ModTime: time.Unix(1e9, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawTar is a tar of the given headers (regular files get their Name as
// content).
func rawTar(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(h.Name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func helloPlugin(version string, extra map[string]string) map[string]string {
	files := map[string]string{
		"hello-git.php": "<?php\n/*\nPlugin Name: Hello Git\nVersion: " + version + "\n*/\n" +
			"require __DIR__ . '/inc/footer.php';\n",
		"inc/footer.php": "<?php\nadd_action('wp_footer', function () { echo '<p>hello-git " + version + "</p>'; });\n",
		"bin/build.sh":   "#!/bin/sh\necho build\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	return files
}

// gitRepoServer serves a repository holding files (one commit on main)
// with git http-backend over plain HTTP; it returns its URL and commit.
func gitRepoServer(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed: %v", err)
	}
	root := t.TempDir()
	work := filepath.Join(root, "work")
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.com"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run(root, "init", "-q", "-b", "main", work)
	for p, content := range files {
		full := filepath.Join(work, p)
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	run(work, "add", "-A")
	run(work, "commit", "-q", "-m", "plugin")
	run(root, "clone", "-q", "--bare", work, filepath.Join(root, "repo.git"))
	srv := httptest.NewServer(&cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Stderr: io.Discard,
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	t.Cleanup(srv.Close)
	return srv.URL + "/repo.git", run(work, "rev-parse", "HEAD")
}

// readerFunc is a Reader made of a function.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
