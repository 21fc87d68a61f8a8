package gitdeploy_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/internal/gittest"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/gitdeploy"
)

// pluginFiles is a plugin of many files, so a second fetch that reuses
// the cache is told apart from one that does not.
func pluginFiles(version string) map[string]string {
	files := map[string]string{
		"hello.php":  "<?php\n/*\nPlugin Name: Hello Git\nVersion: " + version + "\n*/\n",
		"bin/run.sh": "#!/bin/sh\necho run\n",
		"readme.txt": "=== Hello Git ===\n",
	}
	for i := range 150 {
		files[fmt.Sprintf("lib/part-%03d.php", i)] = fmt.Sprintf("<?php // part %d of the plugin\n", i)
	}
	return files
}

// untar reads a tar stream into name → header and content.
func untar(t *testing.T, b []byte) (map[string]*tar.Header, map[string]string) {
	t.Helper()
	hdrs, content := map[string]*tar.Header{}, map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, content
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs[h.Name], content[h.Name] = h, string(data)
	}
}

// objects is how many objects a bare repository holds, loose and packed.
func objects(t *testing.T, repo string) int {
	t.Helper()
	var n int
	for _, line := range strings.Split(gittest.Git(t, repo, "count-objects", "-v"), "\n") {
		var v int
		if _, err := fmt.Sscanf(line, "count: %d", &v); err == nil {
			n += v
		}
		if _, err := fmt.Sscanf(line, "in-pack: %d", &v); err == nil {
			n += v
		}
	}
	return n
}

// emptyTmp points TMPDIR at a fresh directory, to check nothing (a key
// file, git's home) is left there.
func emptyTmp(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	return dir
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
}

// TestFetchHTTPS fetches with a token over https from git http-backend:
// the tree and its tar are the branch's; a second fetch after a push
// reuses the cache; another branch; missing branch and repository, wrong
// and missing token in words; and no token in any process's argv.
func TestFetchHTTPS(t *testing.T) {
	tmp := emptyTmp(t)
	srv := gittest.NewHTTPServer(t)
	repo := gittest.NewRepo(t, srv.Root, "hello", pluginFiles("1.0"))
	head := gittest.Git(t, repo.Bare, "rev-parse", "main")
	const token = "ghp_TestToken0123456789abcdefSECRET"
	srv.RequireToken(token)
	shim, argvLog := gittest.GitShim(t)
	f := &gitdeploy.Fetcher{Dir: t.TempDir(), CAFile: srv.CAFile, Git: shim}
	ctx := context.Background()
	src := gitdeploy.Source{RepoID: "rep_hello", URL: srv.URL("127.0.0.1", "hello"), Branch: "main", Token: token}

	tree, err := f.Fetch(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if tree.SHA != head || len(tree.Files) != 153 {
		t.Fatalf("tree %s with %d files; want %s with 153", tree.SHA, len(tree.Files), head)
	}
	var buf bytes.Buffer
	if err := tree.WriteTar(ctx, &buf, "hello-git"); err != nil {
		t.Fatal(err)
	}
	hdrs, content := untar(t, buf.Bytes())
	if !strings.Contains(content["hello-git/hello.php"], "Version: 1.0") || content["hello-git/lib/part-007.php"] != "<?php // part 7 of the plugin\n" {
		t.Fatalf("tar content: %q", content["hello-git/hello.php"])
	}
	for name, want := range map[string]byte{"hello-git/": tar.TypeDir, "hello-git/lib/": tar.TypeDir, "hello-git/bin/": tar.TypeDir,
		"hello-git/bin/run.sh": tar.TypeReg} {
		if h := hdrs[name]; h == nil || h.Typeflag != want {
			t.Fatalf("%s: %+v", name, h)
		}
	}
	if hdrs["hello-git/bin/run.sh"].Mode != 0o755 || hdrs["hello-git/hello.php"].Mode != 0o644 {
		t.Fatalf("modes %o %o", hdrs["hello-git/bin/run.sh"].Mode, hdrs["hello-git/hello.php"].Mode)
	}
	if len(hdrs) != 153+3 {
		t.Fatalf("%d entries", len(hdrs))
	}
	for name, h := range hdrs {
		if !strings.HasPrefix(name, "hello-git/") || h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			t.Fatalf("entry %s type %c", name, h.Typeflag)
		}
	}

	t.Run("a second fetch gets the new commit from the same cache", func(t *testing.T) {
		cache := filepath.Join(f.Dir, "rep_hello", "repo.git")
		if err := os.WriteFile(filepath.Join(cache, "marker"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		before := objects(t, cache)
		repo.Commit("v1.1", map[string]string{"hello.php": "<?php\n/*\nPlugin Name: Hello Git\nVersion: 1.1\n*/\n"})
		head2 := repo.Push("main")
		tree2, err := f.Fetch(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		if tree2.SHA != head2 || head2 == head {
			t.Fatalf("second fetch %s, want %s", tree2.SHA, head2)
		}
		if _, err := os.Stat(filepath.Join(cache, "marker")); err != nil {
			t.Fatal("the cache was made anew")
		}
		// The new commit, its tree and the changed file: the 150 parts
		// were not sent again.
		if grew := objects(t, cache) - before; grew > 5 {
			t.Fatalf("the cache grew by %d objects for a one-file change", grew)
		}
		var buf bytes.Buffer
		if err := tree2.WriteTar(ctx, &buf, ""); err != nil {
			t.Fatal(err)
		}
		if _, content := untar(t, buf.Bytes()); !strings.Contains(content["hello.php"], "Version: 1.1") {
			t.Fatalf("hello.php: %q", content["hello.php"])
		}
	})

	t.Run("another branch", func(t *testing.T) {
		repo.Commit("develop work", map[string]string{"develop.txt": "on develop\n"})
		dev := repo.Push("develop")
		s := src
		s.Branch = "develop"
		tr, err := f.Fetch(ctx, s)
		if err != nil || tr.SHA != dev {
			t.Fatalf("develop: %v %v", tr, err)
		}
	})

	for _, tc := range []struct {
		name   string
		change func(*gitdeploy.Source)
		want   error
		words  string
	}{
		{"missing branch", func(s *gitdeploy.Source) { s.Branch = "no-such-branch" }, gitdeploy.ErrBranchNotFound, "branch not found"},
		{"wrong token", func(s *gitdeploy.Source) { s.Token = "ghp_WrongToken" }, gitdeploy.ErrAuth, "authentication failed: check the token"},
		{"no token", func(s *gitdeploy.Source) { s.Token = "" }, gitdeploy.ErrAuth, "authentication failed"},
		{"missing repository", func(s *gitdeploy.Source) { s.URL = srv.URL("127.0.0.1", "nothing-here") }, gitdeploy.ErrRepoNotFound, "repository not found"},
		{"token over http", func(s *gitdeploy.Source) { s.URL = strings.Replace(s.URL, "https:", "http:", 1) }, gitdeploy.ErrInvalid, "only sent over https"},
		{"token in the URL", func(s *gitdeploy.Source) { s.URL = strings.Replace(s.URL, "https://", "https://u:"+token+"@", 1) },
			gitdeploy.ErrInvalid, "no user or password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := src
			tc.change(&s)
			_, err := f.Fetch(ctx, s)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("got %v; want %v (%q)", err, tc.want, tc.words)
			}
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "ghp_WrongToken") {
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}

	requests, leaks := srv.Stats()
	if requests == 0 || len(leaks) > 0 {
		t.Fatalf("%d requests; a token in argv: %v", requests, leaks)
	}
	argv, err := os.ReadFile(argvLog)
	if err != nil || !bytes.Contains(argv, []byte("fetch")) {
		t.Fatalf("the shim saw no fetch: %v %s", err, argv)
	}
	if bytes.Contains(argv, []byte(token)) || bytes.Contains(argv, []byte("Authorization")) {
		t.Fatalf("git's argv held the token:\n%s", argv)
	}
	assertEmpty(t, tmp)
}

// TestFetchPinned: a URL naming repo.test (a name no resolver knows)
// pinned to 127.0.0.1 reaches the server, and the certificate is checked
// against the name; without the pin the name does not resolve.
func TestFetchPinned(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	repo := gittest.NewRepo(t, srv.Root, "pinned", map[string]string{"style.css": "/* Theme Name: Pinned */\n"})
	f := &gitdeploy.Fetcher{Dir: t.TempDir(), CAFile: srv.CAFile}
	src := gitdeploy.Source{RepoID: "rep_pin", URL: srv.URL("repo.test", "pinned"), Branch: "main", Pin: "127.0.0.1"}
	tree, err := f.Fetch(context.Background(), src)
	if err != nil || tree.SHA != gittest.Git(t, repo.Bare, "rev-parse", "main") {
		t.Fatalf("pinned fetch: %v %v", tree, err)
	}
	src.Pin = ""
	if _, err := f.Fetch(context.Background(), src); !errors.Is(err, gitdeploy.ErrUnreachable) {
		t.Fatalf("unpinned: %v", err)
	}
}

// TestFetchSSH fetches over ssh from a real sshd with a deploy key: by
// address, by a pinned name (its host key trusted under the name), with
// a wrong key, and from a server whose host key changed.
func TestFetchSSH(t *testing.T) {
	tmp := emptyTmp(t)
	keys := t.TempDir()
	keyFile, pub := gittest.Keygen(t, keys, "deploy")
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPub := gittest.Keygen(t, keys, "other")
	srv := gittest.NewSSHServer(t, pub)
	repo := gittest.NewRepo(t, t.TempDir(), "theme", map[string]string{"style.css": "/* Theme Name: Over SSH */\n", "index.php": "<?php\n"})
	head := gittest.Git(t, repo.Bare, "rev-parse", "main")
	shim, argvLog := gittest.GitShim(t)
	f := &gitdeploy.Fetcher{Dir: t.TempDir(), Git: shim}
	ctx := context.Background()
	// A key pasted from a browser: CRLF, no last newline.
	pasted := bytes.TrimSpace(bytes.ReplaceAll(key, []byte("\n"), []byte("\r\n")))
	src := gitdeploy.Source{RepoID: "rep_ssh", URL: srv.URL("127.0.0.1", repo.Bare), Branch: "main", SSHKey: pasted}

	tree, err := f.Fetch(ctx, src)
	if err != nil || tree.SHA != head || len(tree.Files) != 2 {
		t.Fatalf("ssh fetch: %+v %v", tree, err)
	}

	t.Run("pinned name", func(t *testing.T) {
		s := src
		s.RepoID, s.URL, s.Pin = "rep_sshpin", srv.URL("repo.test", repo.Bare), "127.0.0.1"
		tree, err := f.Fetch(ctx, s)
		if err != nil || tree.SHA != head {
			t.Fatalf("pinned ssh fetch: %v %v", tree, err)
		}
		known, err := os.ReadFile(filepath.Join(f.Dir, "rep_sshpin", "known_hosts"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(known), "repo.test") || !strings.Contains(string(known), srv.HostKey) || strings.Contains(string(known), "127.0.0.1") {
			t.Fatalf("known_hosts: %s", known)
		}
	})

	t.Run("wrong key", func(t *testing.T) {
		otherKey, err := os.ReadFile(filepath.Join(keys, "other"))
		if err != nil {
			t.Fatal(err)
		}
		s := src
		s.SSHKey = otherKey
		_, err = f.Fetch(ctx, s)
		if !errors.Is(err, gitdeploy.ErrAuth) || !strings.Contains(err.Error(), "check the deploy key is added to the repository") {
			t.Fatalf("wrong key: %v", err)
		}
	})

	t.Run("not a key", func(t *testing.T) {
		s := src
		s.SSHKey = []byte("ssh-ed25519 AAAA... the public half")
		if _, err := f.Fetch(ctx, s); !errors.Is(err, gitdeploy.ErrInvalid) {
			t.Fatalf("public key as deploy key: %v", err)
		}
	})

	t.Run("host key changed", func(t *testing.T) {
		// Another server (another host key) under the same name: the
		// name's first key stays the one trusted.
		other := gittest.NewSSHServer(t, append(append([]byte{}, pub...), otherPub...))
		s := src
		s.RepoID, s.URL, s.Pin = "rep_sshpin", other.URL("repo.test", repo.Bare), "127.0.0.1"
		_, err := f.Fetch(ctx, s)
		if other.Port == srv.Port || !errors.Is(err, gitdeploy.ErrHostKey) {
			t.Fatalf("changed host key: %v", err)
		}
	})

	argv, err := os.ReadFile(argvLog)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Split(strings.TrimSpace(string(key)), "\n")[1] // a line of the key's base64
	if bytes.Contains(argv, []byte(body)) || bytes.Contains(argv, []byte("PRIVATE KEY")) {
		t.Fatalf("the key in git's argv:\n%s", argv)
	}
	assertEmpty(t, tmp) // the key file and its directory are gone
}

// TestTreeRefusals: trees that may not be deployed fail the fetch, in
// words naming the path, before any content is read.
func TestTreeRefusals(t *testing.T) {
	srv := gittest.NewHTTPServer(t)
	shim, argvLog := gittest.GitShim(t)
	ctx := context.Background()
	many := map[string]string{}
	for i := range 30 {
		many[fmt.Sprintf("f%02d.txt", i)] = strings.Repeat("x", 100)
	}
	big := map[string]string{"big.bin": strings.Repeat("y", 5000), "small.txt": "z"}

	gittest.NewRepo(t, srv.Root, "symlink", map[string]string{"plugin.php": "<?php\n", "inc/passwd": "->/etc/passwd"})
	gittest.NewRepo(t, srv.Root, "many", many)
	gittest.NewRepo(t, srv.Root, "big", big)
	sub := gittest.NewRepo(t, srv.Root, "submodule", map[string]string{"plugin.php": "<?php\n"})
	gittest.Git(t, sub.Work, "update-index", "--add", "--cacheinfo", "160000,"+gittest.Git(t, sub.Work, "rev-parse", "HEAD")+",vendor/lib")
	gittest.Git(t, sub.Work, "commit", "-q", "-m", "submodule")
	sub.Push("main")
	// A tree git itself would never write: a ".git" entry.
	dotgit := gittest.NewRepo(t, srv.Root, "dotgit", map[string]string{"plugin.php": "<?php\n"})
	blob := strings.Fields(gittest.Git(t, dotgit.Bare, "ls-tree", "main", "plugin.php"))[2]
	evil := gitStdin(t, dotgit.Bare, "100644 blob "+blob+"\t.git\n", "mktree")
	commit := gittest.Git(t, dotgit.Bare, "commit-tree", evil, "-p", "main", "-m", "evil")
	gittest.Git(t, dotgit.Bare, "update-ref", "refs/heads/main", commit)
	// A tree whose pack is larger than git may write.
	noise := make([]byte, 300<<10)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	gittest.NewRepo(t, srv.Root, "pack", map[string]string{"noise.bin": hex.EncodeToString(noise)})

	for _, tc := range []struct {
		repo   string
		limits gitdeploy.Limits
		words  string
	}{
		{"symlink", gitdeploy.Limits{}, "inc/passwd is a symbolic link"},
		{"submodule", gitdeploy.Limits{}, "vendor/lib is a submodule"},
		{"dotgit", gitdeploy.Limits{}, "cannot be deployed"},
		{"many", gitdeploy.Limits{MaxFiles: 10}, "more than 10 files"},
		{"big", gitdeploy.Limits{MaxBytes: 4000, MaxFileBytes: 1 << 20}, "add up to more than"},
		{"big", gitdeploy.Limits{MaxFileBytes: 4000}, "big.bin is larger than"},
		{"pack", gitdeploy.Limits{MaxPackBytes: 128 << 10}, "objects are larger than"},
	} {
		t.Run(tc.repo+" "+tc.words, func(t *testing.T) {
			f := &gitdeploy.Fetcher{Dir: t.TempDir(), CAFile: srv.CAFile, Git: shim, Limits: tc.limits}
			tree, err := f.Fetch(ctx, gitdeploy.Source{RepoID: "rep_" + tc.repo, URL: srv.URL("127.0.0.1", tc.repo), Branch: "main"})
			if !errors.Is(err, gitdeploy.ErrRefused) || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("got %v, %v; want ErrRefused with %q", tree, err, tc.words)
			}
		})
	}
	// Trees are listed, never read: no content left git.
	argv, _ := os.ReadFile(argvLog)
	if bytes.Contains(argv, []byte("cat-file")) || !bytes.Contains(argv, []byte("ls-tree")) {
		t.Fatalf("git was asked:\n%s", argv)
	}
}

func gitStdin(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(gittest.RealGit(t), args...)
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
