package gitdeploy

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw, pin string
		want     remote
	}{
		{"https://github.com/acme/plugin.git", "", remote{URL: "https://github.com/acme/plugin.git", Host: "github.com", Port: "443"}},
		{"https://github.com/acme/plugin.git", "140.82.121.4", remote{URL: "https://github.com/acme/plugin.git", Host: "github.com", Port: "443"}},
		{"http://10.0.0.5:8080/mirror/plugin.git", "", remote{URL: "http://10.0.0.5:8080/mirror/plugin.git", Host: "10.0.0.5", Port: "8080"}},
		{"ssh://git@github.com/acme/plugin.git", "", remote{SSH: true, URL: "ssh://git@github.com/acme/plugin.git", Host: "github.com"}},
		{"ssh://git@gitea.example:2222/acme/plugin.git", "192.0.2.7", remote{SSH: true, URL: "ssh://git@192.0.2.7:2222/acme/plugin.git",
			Host: "gitea.example", Port: "2222"}},
		{"ssh://git@gitlab.com/acme/plugin.git", "2001:db8::1", remote{SSH: true, URL: "ssh://git@[2001:db8::1]/acme/plugin.git", Host: "gitlab.com"}},
		{"git@github.com:acme/plugin.git", "", remote{SSH: true, URL: "git@github.com:acme/plugin.git", Host: "github.com"}},
		{"git@github.com:acme/plugin.git", "140.82.121.4", remote{SSH: true, URL: "git@140.82.121.4:acme/plugin.git", Host: "github.com"}},
		{"git@github.com:acme/plugin.git", "2001:db8::1", remote{SSH: true, URL: "git@[2001:db8::1]:acme/plugin.git", Host: "github.com"}},
	} {
		r, err := parseURL(tc.raw, net.ParseIP(tc.pin))
		if err != nil || *r != tc.want {
			t.Errorf("%s pinned %q: %+v %v; want %+v", tc.raw, tc.pin, r, err, tc.want)
		}
	}
	for _, raw := range []string{
		"", "file:///etc", "/srv/repo.git", "ext::sh -c touch% /tmp/x", "git://github.com/a/b.git", "https://u:p@github.com/a/b.git",
		"https://tok@github.com/a/b.git", "https://github.com", "https://github.com/", "https://github.com/a/b.git?x=1",
		"ssh://github.com/a/b.git", "ssh://git:pw@github.com/a/b.git", "ssh://git@-oProxyCommand=x/a.git",
		"ssh://git@host;touch/a.git", "git@host$(id):a.git", "git@host:-oProxyCommand=x", "-u/x", "https://github.com/a b.git",
		"ssh://-oProxyCommand=x@host/a.git", "git@:a.git", "https://ho%20st/a.git",
	} {
		if r, err := parseURL(raw, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %+v %v", raw, r, err)
		}
	}
}

func TestCheckSource(t *testing.T) {
	key := []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n...\n-----END OPENSSH PRIVATE KEY-----\n")
	good := Source{RepoID: "rep_1", URL: "https://github.com/a/b.git", Branch: "main"}
	if _, err := good.check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    func(Source) Source
	}{
		{"repo id with a slash", func(s Source) Source { s.RepoID = "../x"; return s }},
		{"empty repo id", func(s Source) Source { s.RepoID = ""; return s }},
		{"token over http", func(s Source) Source { s.URL, s.Token = "http://h/a.git", "t"; return s }},
		{"key for https", func(s Source) Source { s.SSHKey = key; return s }},
		{"ssh without key", func(s Source) Source { s.URL = "git@github.com:a/b.git"; return s }},
		{"token for ssh", func(s Source) Source { s.URL, s.SSHKey, s.Token = "git@github.com:a/b.git", key, "t"; return s }},
		{"token with a newline", func(s Source) Source { s.Token = "abc\r\nX-Evil: 1"; return s }},
		{"token user with a colon", func(s Source) Source { s.Token, s.TokenUser = "t", "a:b"; return s }},
		{"pin not an address", func(s Source) Source { s.Pin = "example.com"; return s }},
	} {
		if _, err := tc.s(good).check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestCheckBranch(t *testing.T) {
	for _, b := range []string{"main", "release/2.x", "feature/JIRA-12_fix", "v1.0", "a+b", "ümlaut"} {
		if err := checkBranch(b); err != nil {
			t.Errorf("%q: %v", b, err)
		}
	}
	for _, b := range []string{"", "-main", "--upload-pack=x", "a..b", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[", `a\b`, "a/", "a.",
		"a.lock", "a@{1}", "@", "a//b", ".hidden", "a/.b", "a\x00b", "a\nb", strings.Repeat("a", 256)} {
		if err := checkBranch(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", b, err)
		}
	}
}

func TestParseEntry(t *testing.T) {
	lim := DefaultLimits()
	blob := strings.Repeat("a", 40)
	for _, tc := range []struct {
		rec  string
		want File
	}{
		{"100644 blob " + blob + "     12\tplugin.php", File{Path: "plugin.php", Mode: 0o644, Size: 12, Blob: blob}},
		{"100755 blob " + blob + " 0\tbin/run", File{Path: "bin/run", Mode: 0o755, Blob: blob}},
		{"100664 blob " + blob + " 3\told/style.css", File{Path: "old/style.css", Mode: 0o644, Size: 3, Blob: blob}},
		{"100644 blob " + strings.Repeat("b", 64) + " 3\tsha256.txt", File{Path: "sha256.txt", Mode: 0o644, Size: 3, Blob: strings.Repeat("b", 64)}},
	} {
		f, err := parseEntry([]byte(tc.rec), lim)
		if err != nil || f != tc.want {
			t.Errorf("%q: %+v %v", tc.rec, f, err)
		}
	}
	for _, tc := range []struct{ rec, words string }{
		{"120000 blob " + blob + " 11\twp-config.php", "wp-config.php is a symbolic link"},
		{"160000 commit " + blob + " -\tvendor/lib", "vendor/lib is a submodule"},
		{"100644 blob " + blob + " 1\t../outside.php", "leaves the tree"},
		{"100644 blob " + blob + " 1\ta/../../b", "leaves the tree"},
		{"100644 blob " + blob + " 1\t/etc/passwd", "leaves the tree"},
		{"100644 blob " + blob + " 1\t.git/hooks/post-checkout", "git's own directory"},
		{"100644 blob " + blob + " 1\tsub/.GIT/config", "git's own directory"},
		{"100644 blob " + blob + " 1\ta//b", "leaves the tree"},
		{"100644 blob " + blob + " 1\t./a", "leaves the tree"},
		{"100644 blob " + blob + " 1\ta\nb", "control character"},
		{"100644 blob " + blob + " 999999999999\thuge.bin", "huge.bin is larger than 64 MiB"},
		{"040000 tree " + blob + " -\tdir", "dir is not a regular file"},
	} {
		if f, err := parseEntry([]byte(tc.rec), lim); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%q: %+v %v; want %q", tc.rec, f, err, tc.words)
		}
	}
}

func TestClassifyScrubs(t *testing.T) {
	s := Source{Token: "glpat-SECRETSECRET", TokenUser: "oauth2"}
	sc := newScrubber(s)
	stderr := "fatal: Authentication failed for 'https://oauth2:glpat-SECRETSECRET@gitlab.com/a/b.git/'\n" +
		"debug: Authorization: Basic " + basicAuth("oauth2", s.Token) + "\n"
	err := classify(&remote{URL: "https://gitlab.com/a/b.git"}, stderr, sc)
	if !errors.Is(err, ErrAuth) || strings.Contains(err.Error(), "SECRETSECRET") || strings.Contains(err.Error(), basicAuth("oauth2", s.Token)) {
		t.Fatalf("%v", err)
	}
	for stderr, want := range map[string]error{
		"fatal: unable to access 'https://x/': Could not resolve host: x":                    ErrUnreachable,
		"ssh: connect to host 192.0.2.1 port 22: Connection timed out":                       ErrUnreachable,
		"fatal: couldn't find remote ref refs/heads/nope":                                    ErrBranchNotFound,
		"remote: Repository not found.\nfatal: repository 'https://x/a.git/' not found":      ErrRepoNotFound,
		"git@github.com: Permission denied (publickey).":                                     ErrAuth,
		"fatal: unable to access 'https://x/': The requested URL returned error: 403":        ErrAuth,
		"Host key verification failed.":                                                      ErrHostKey,
		"error: object 1234: hasDotgit: contains '.git'\nfatal: fsck error in packed object": ErrRefused,
	} {
		if err := classify(&remote{}, stderr, nil); !errors.Is(err, want) {
			t.Errorf("%q: %v; want %v", stderr, err, want)
		}
	}
}
