package toolbox_test

import (
	"archive/tar"
	"bytes"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/gittest"
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
// over HTTPS (gittest); it returns its URL, its commit and the CA file
// that trusts the server.
func gitRepoServer(t *testing.T, files map[string]string) (string, string, string) {
	t.Helper()
	srv := gittest.NewHTTPServer(t)
	repo := gittest.NewRepo(t, srv.Root, "repo", files)
	return srv.URL("127.0.0.1", "repo"), gittest.Git(t, repo.Bare, "rev-parse", "refs/heads/main"), srv.CAFile
}

// readerFunc is a Reader made of a function.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
