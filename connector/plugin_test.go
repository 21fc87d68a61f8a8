package connector

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// php finds the host's PHP; a missing PHP fails the tests (never skips).
func php(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("php")
	if err != nil {
		t.Fatalf("the connector tests need the php CLI on PATH: %v", err)
	}
	return p
}

// runPHP runs a driver script from testdata with stdin and args.
func runPHP(t *testing.T, env []string, stdin []byte, script string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(php(t), append([]string{"-d", "display_errors=stderr", "-d", "error_reporting=-1", filepath.Join("testdata", script)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("php %s: %v\nstderr: %s\nstdout: %.2000s", script, err, stderr.String(), out)
	}
	return out
}

func TestPHPLint(t *testing.T) {
	bin := php(t)
	var files []string
	for _, root := range []string{"plugin", "testdata"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".php") {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) < 12 {
		t.Fatalf("only %d PHP files found: %v", len(files), files)
	}
	for _, f := range files {
		out, err := exec.Command(bin, "-l", f).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "No syntax errors") {
			t.Errorf("php -l %s: %v\n%s", f, err, out)
		}
	}
}

func TestPluginZip(t *testing.T) {
	b, err := PluginZip()
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range zr.File {
		if !strings.HasPrefix(f.Name, "sandboxd-connector/") {
			t.Errorf("entry outside sandboxd-connector/: %s", f.Name)
		}
		names[f.Name] = true
	}
	for _, want := range []string{"sandboxd-connector/sandboxd-connector.php", "sandboxd-connector/uninstall.php",
		"sandboxd-connector/readme.txt", "sandboxd-connector/assets/admin.js", "sandboxd-connector/includes/tar-writer.php"} {
		if !names[want] {
			t.Errorf("zip lacks %s", want)
		}
	}
	f, err := zr.Open("sandboxd-connector/sandboxd-connector.php")
	if err != nil {
		t.Fatal(err)
	}
	main, _ := io.ReadAll(f)
	for _, h := range []string{"Plugin Name: Sandboxd Connector", "Version: 1.0.0", "Requires PHP: 7.4", "License: GPLv2 or later", "Description:"} {
		if !regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(h), ": ", `:\s+`)).Match(main) {
			t.Errorf("main file header lacks %q", h)
		}
	}
}

// TestPluginHygiene checks rules that are easy to break: no public ajax
// actions, every ajax handler guarded, the browser-facing element ids.
func TestPluginHygiene(t *testing.T) {
	all := ""
	_ = fs.WalkDir(Plugin, "plugin", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := Plugin.ReadFile(p)
			all += string(b)
		}
		return err
	})
	if strings.Contains(all, "wp_ajax_nopriv_") || strings.Contains(all, "register_rest_route") {
		t.Error("the plugin must not add unauthenticated endpoints")
	}
	for _, id := range []string{"sbx-service-url", "sbx-save", "sbx-connect", "sbx-status", "sbx-start", "sbx-progress", "sbx-phase",
		"sbx-result-url", "sbx-open-admin", "sbx-error", "sbx-resume", "sbx-cancel"} {
		if !strings.Contains(all, `id="`+id+`"`) {
			t.Errorf("admin page lacks #%s", id)
		}
	}
	admin, _ := Plugin.ReadFile("plugin/sandboxd-connector/includes/admin-page.php")
	for _, m := range regexp.MustCompile(`(?s)public static function ajax_\w+\(\) \{\n(.*?)\n\t\}`).FindAllSubmatch(admin, -1) {
		if !strings.HasPrefix(strings.TrimSpace(string(m[1])), "self::guard();") {
			t.Errorf("ajax handler does not start with self::guard(): %s", m[0])
		}
	}
	if !strings.Contains(string(admin), "check_ajax_referer( self::NONCE, 'nonce' );\n\t\tif ( ! current_user_can( self::CAP ) )") {
		t.Error("guard() must check the nonce and manage_options")
	}
}

type tarEntry struct {
	typ  byte
	mode int64
	body []byte
}

func TestTarWriter(t *testing.T) {
	src := t.TempDir()
	work := t.TempDir()
	long := strings.Repeat("a-rather-long-directory-name/", 4) + strings.Repeat("x", 60) + ".txt"
	bin := make([]byte, 300_000)
	for i := range bin {
		bin[i] = byte(i*7 + i/251)
	}
	files := map[string]struct {
		body []byte
		mode fs.FileMode
	}{
		"uploads/2024/02/pic.bin":  {bin, 0o644},
		"plugins/tool/run.sh":      {[]byte("#!/bin/sh\necho hi\n"), 0o755},
		"themes/t/style.css":       {[]byte("/* Theme Name: T */\n"), 0o644},
		"themes/t/empty.txt":       {nil, 0o600},
		"uploads/" + long:          {[]byte("long name"), 0o644},
		"cache/page.html":          {[]byte("cached"), 0o644},
		"uploads/backwpup-1/b.zip": {[]byte("backup"), 0o644},
		"index.php":                {[]byte("<?php // Silence is golden."), 0o644},
	}
	for rel, f := range files {
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.body, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(src, "uploads", "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(src, "uploads", "etc-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../index.php", filepath.Join(src, "uploads", "file-link.php")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "site.tar.gz")
	// The first step stops inside pic.bin or before it, depending on readdir order.
	res := runPHP(t, []string{"SBX_FIRST_BUDGET=100000"}, nil, "tar_driver.php", src, out, work)
	var info struct {
		Done1, Done2      bool
		Members, Symlinks int
		Notes             []string
	}
	if err := json.Unmarshal(res, &info); err != nil {
		t.Fatalf("%v: %s", err, res)
	}
	if info.Done1 || !info.Done2 || info.Members != 2 || info.Symlinks != 2 || len(info.Notes) != 0 {
		t.Fatalf("driver: %s", res)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Two gzip members, one per step.
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	zr.Multistream(false)
	members := 0
	br := bufio.NewReader(bytes.NewReader(raw))
	zr.Reset(br)
	for {
		zr.Multistream(false)
		if _, err := io.Copy(io.Discard, zr); err != nil {
			t.Fatal(err)
		}
		members++
		if err := zr.Reset(br); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if members != 2 {
		t.Fatalf("%d gzip members, want 2", members)
	}
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	got := map[string]tarEntry{}
	var order []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := got[h.Name]; dup {
			t.Errorf("duplicate entry %s", h.Name)
		}
		got[h.Name] = tarEntry{h.Typeflag, h.Mode, b}
		order = append(order, h.Name)
		if h.ModTime.IsZero() || h.ModTime.Unix() < 1_000_000_000 {
			t.Errorf("%s: mtime %v", h.Name, h.ModTime)
		}
	}
	want := map[string]tarEntry{
		"wp-content/index.php":                {tar.TypeReg, 0o644, files["index.php"].body},
		"wp-content/uploads/":                 {tar.TypeDir, 0o755, nil},
		"wp-content/uploads/2024/":            {tar.TypeDir, 0o755, nil},
		"wp-content/uploads/2024/02/":         {tar.TypeDir, 0o755, nil},
		"wp-content/uploads/2024/02/pic.bin":  {tar.TypeReg, 0o644, bin},
		"wp-content/uploads/empty/":           {tar.TypeDir, 0o755, nil},
		"wp-content/plugins/":                 {tar.TypeDir, 0o755, nil},
		"wp-content/plugins/tool/":            {tar.TypeDir, 0o755, nil},
		"wp-content/plugins/tool/run.sh":      {tar.TypeReg, 0o755, files["plugins/tool/run.sh"].body},
		"wp-content/themes/":                  {tar.TypeDir, 0o755, nil},
		"wp-content/themes/t/":                {tar.TypeDir, 0o755, nil},
		"wp-content/themes/t/style.css":       {tar.TypeReg, 0o644, files["themes/t/style.css"].body},
		"wp-content/themes/t/empty.txt":       {tar.TypeReg, 0o644, nil},
		"wp-content/uploads/" + long:          {tar.TypeReg, 0o644, []byte("long name")},
		"wp-content/uploads/backwpup-1/":      {}, // excluded
		"wp-content/cache/":                   {}, // excluded
		"wp-content/uploads/etc-link":         {}, // symlink
		"wp-content/uploads/file-link.php":    {}, // symlink
		"wp-content/cache/page.html":          {},
		"wp-content/uploads/backwpup-1/b.zip": {},
	}
	// Long directory names (>100 bytes with the prefix) come as PAX too.
	for d := "uploads/" + long; ; {
		d = filepath.Dir(d)
		if d == "." {
			break
		}
		if _, ok := want["wp-content/"+d+"/"]; !ok {
			want["wp-content/"+d+"/"] = tarEntry{tar.TypeDir, 0o755, nil}
		}
	}
	if len("wp-content/uploads/"+long) <= 100 {
		t.Fatal("the long name is not long")
	}
	for name, w := range want {
		g, ok := got[name]
		if w.typ == 0 {
			if ok {
				t.Errorf("%s should not be archived", name)
			}
			continue
		}
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if g.typ != w.typ || g.mode != w.mode || !bytes.Equal(g.body, w.body) {
			t.Errorf("%s: type %c mode %o len %d, want type %c mode %o len %d", name, g.typ, g.mode, len(g.body), w.typ, w.mode, len(w.body))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected entry %s", name)
		}
	}
	// Parents come before their children.
	seen := map[string]bool{}
	for _, n := range order {
		if p := filepath.Dir(strings.TrimSuffix(n, "/")); p != "wp-content" && !seen[p+"/"] {
			t.Errorf("%s comes before its directory", n)
		}
		seen[n] = true
	}
}

// mysqlEscape is mysql_real_escape_string for utf8mb4 as mysqlnd does it:
// valid multi-byte sequences are copied; \0 \n \r \ ' " and \x1a get a
// backslash (with the listed letters for the control bytes).
func mysqlEscape(s []byte) []byte {
	var b bytes.Buffer
	for _, c := range s {
		switch c {
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`\'`)
		case '"':
			b.WriteString(`\"`)
		case 0x1a:
			b.WriteString(`\Z`)
		default:
			b.WriteByte(c)
		}
	}
	return b.Bytes()
}

// parseValues reads "INSERT INTO `t` VALUES (...),(...);" statements as
// MySQL's lexer reads single-quoted strings (backslash escapes, with
// "\x" for any other x meaning x) and NULL.
func parseValues(t *testing.T, sql []byte, table string) (rows [][][]byte, stmts []int) {
	t.Helper()
	prefix := []byte("INSERT INTO " + table + " VALUES ")
	i := 0
	for i < len(sql) {
		if !bytes.HasPrefix(sql[i:], prefix) {
			t.Fatalf("at %d: no INSERT: %q", i, sql[i:min(len(sql), i+80)])
		}
		start := i
		i += len(prefix)
		for {
			if sql[i] != '(' {
				t.Fatalf("at %d: want (", i)
			}
			i++
			var row [][]byte
			for {
				if bytes.HasPrefix(sql[i:], []byte("NULL")) {
					row = append(row, nil)
					i += 4
				} else if sql[i] == '\'' {
					i++
					v := []byte{}
					for sql[i] != '\'' {
						if sql[i] == '\\' {
							i++
							m := map[byte]byte{'0': 0, 'n': '\n', 'r': '\r', 'Z': 0x1a, 't': '\t', 'b': '\b'}
							if r, ok := m[sql[i]]; ok {
								v = append(v, r)
							} else {
								v = append(v, sql[i])
							}
						} else {
							v = append(v, sql[i])
						}
						i++
					}
					i++
					row = append(row, v)
				} else {
					t.Fatalf("at %d: bad value %q", i, sql[i:min(len(sql), i+40)])
				}
				if sql[i] == ',' {
					i++
					continue
				}
				if sql[i] != ')' {
					t.Fatalf("at %d: want )", i)
				}
				i++
				break
			}
			rows = append(rows, row)
			if sql[i] == ',' {
				i++
				continue
			}
			if !bytes.HasPrefix(sql[i:], []byte(";\n")) {
				t.Fatalf("at %d: want ;", i)
			}
			i += 2
			stmts = append(stmts, i-start)
			break
		}
	}
	return rows, stmts
}

func TestSQLEscaping(t *testing.T) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	values := [][]byte{
		[]byte(`it's a "quote"`), []byte(`back\slash\\`), []byte("nul\x00byte"), []byte("line\nfeed\r\nend"),
		[]byte("ctrl-z \x1a"), []byte("emoji 😀 ünï ✓ 中文"), nil, binary, []byte(""), []byte("%s %d 100% _like_"),
		[]byte("\xc3(\xe2\x28\xa1 invalid utf8 \xf0\x9f\x98 \xff\x5c\x27"), []byte("0"), []byte(strings.Repeat("ab'\\", 5000)),
		[]byte(`a:2:{s:4:"home";s:22:"http://live.test/?a=1";}`),
	}
	enc := func(v []byte) any {
		if v == nil {
			return nil
		}
		return base64.StdEncoding.EncodeToString(v)
	}
	var in struct {
		Values []any   `json:"values"`
		Rows   [][]any `json:"rows"`
		Max    int     `json:"max"`
	}
	in.Max = 4096
	var rows [][][]byte
	for i, v := range values {
		in.Values = append(in.Values, enc(v))
		row := [][]byte{[]byte{byte('0' + i%10)}, v, values[(i+3)%len(values)]}
		rows = append(rows, row)
		in.Rows = append(in.Rows, []any{enc(row[0]), enc(row[1]), enc(row[2])})
	}
	for i := 0; i < 200; i++ { // enough rows for several statements
		row := [][]byte{[]byte(strings.Repeat("r", i)), nil, []byte("x'\n" + string(rune('a'+i%26)))}
		rows = append(rows, row)
		in.Rows = append(in.Rows, []any{enc(row[0]), enc(row[1]), enc(row[2])})
	}
	stdin, _ := json.Marshal(in)
	out := runPHP(t, nil, stdin, "sql_driver.php")
	var res struct {
		Values []struct {
			Escaped *string
			Quoted  string
		}
		SQL, Header, Prelude, Like string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %.500s", err, out)
	}
	for i, v := range values {
		q, _ := base64.StdEncoding.DecodeString(res.Values[i].Quoted)
		if v == nil {
			if res.Values[i].Escaped != nil || string(q) != "NULL" {
				t.Errorf("NULL: escaped %v quoted %q", res.Values[i].Escaped, q)
			}
			continue
		}
		e, _ := base64.StdEncoding.DecodeString(*res.Values[i].Escaped)
		if want := mysqlEscape(v); !bytes.Equal(e, want) {
			t.Errorf("escape(%q) = %q, want %q", v, e, want)
		}
		if want := "'" + string(mysqlEscape(v)) + "'"; string(q) != want {
			t.Errorf("quote(%q) = %q", v, q)
		}
	}
	sql, _ := base64.StdEncoding.DecodeString(res.SQL)
	got, stmts := parseValues(t, sql, "`wp_t``x`")
	if len(got) != len(rows) {
		t.Fatalf("%d rows back, want %d", len(got), len(rows))
	}
	for i := range rows {
		for j := range rows[i] {
			if (rows[i][j] == nil) != (got[i][j] == nil) || !bytes.Equal(rows[i][j], got[i][j]) {
				t.Errorf("row %d col %d: %q, want %q", i, j, got[i][j], rows[i][j])
			}
		}
	}
	if len(stmts) < 3 {
		t.Errorf("only %d statements for %d bytes with a %d-byte bound", len(stmts), len(sql), in.Max)
	}
	for _, n := range stmts {
		// A statement exceeds the bound only when it holds one huge row.
		if n > in.Max && n < 20000 {
			t.Errorf("statement of %d bytes over the %d bound", n, in.Max)
		}
	}
	for _, want := range []string{"/*!40101 SET NAMES utf8mb4 */;\n", "SET FOREIGN_KEY_CHECKS=0;\n"} {
		if !strings.HasPrefix(res.Header, "/*!40101 SET NAMES utf8mb4 */;\nSET FOREIGN_KEY_CHECKS=0;\n") || !strings.Contains(res.Header, want) {
			t.Errorf("header %q lacks %q at its start", res.Header, want)
		}
	}
	if !strings.Contains(res.Prelude, "DROP TABLE IF EXISTS `wp_t``x`;\nCREATE TABLE `wp_t``x` (`a` int);\n") {
		t.Errorf("prelude: %q", res.Prelude)
	}
	for _, bad := range []string{"USE ", "CREATE DATABASE", "DEFINER"} {
		if strings.Contains(res.Header+res.Prelude, bad) {
			t.Errorf("dump text holds %q", bad)
		}
	}
	if res.Like != `wp\_50\%\\` {
		t.Errorf("like_escape: %q", res.Like)
	}
}

func TestPKCE(t *testing.T) {
	bases := []string{"http://127.0.0.1:8080", "http://localhost:8080/", "http://sandboxd.localhost", "http://[::1]:9000",
		"https://sandboxes.example.com/", "https://example.com/sbx/", "http://example.com", "ftp://example.com",
		"https://user:pw@example.com", "https://example.com/?x=1", "https://example.com/#f", "javascript:alert(1)", "", "http://127.0.0.1.evil.com"}
	stdin, _ := json.Marshal(bases)
	out := runPHP(t, nil, stdin, "pkce_driver.php")
	var res struct {
		Pairs []struct{ Verifier, Challenge, State string }
		URL   string
		Bases map[string]string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b64url := regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	seen := map[string]bool{}
	for _, p := range res.Pairs {
		if len(p.Verifier) != 43 || !b64url.MatchString(p.Verifier) {
			t.Errorf("verifier %q: want 43 base64url characters", p.Verifier)
		}
		sum := sha256.Sum256([]byte(p.Verifier))
		if want := base64.RawURLEncoding.EncodeToString(sum[:]); p.Challenge != want {
			t.Errorf("challenge %q, want %q", p.Challenge, want)
		}
		if len(p.State) != 43 || !b64url.MatchString(p.State) {
			t.Errorf("state %q", p.State)
		}
		if seen[p.Verifier] || seen[p.State] {
			t.Error("repeated random value")
		}
		seen[p.Verifier], seen[p.State] = true, true
	}
	u, err := url.Parse(res.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Scheme+"://"+u.Host+u.Path != "http://127.0.0.1:8080/connect/authorize" || q.Get("response_type") != "code" ||
		q.Get("client_id") != "cl_1" || q.Get("redirect_uri") != "http://live.test/wp-admin/admin.php?page=sandboxd-connector&sbx=callback" ||
		q.Get("scope") != "import:read import:write" || q.Get("state") != "st" || q.Get("code_challenge") != "ch" ||
		q.Get("code_challenge_method") != "S256" || !strings.Contains(res.URL, "scope=import%3Aread%20import%3Awrite") {
		t.Errorf("authorize URL %s", res.URL)
	}
	want := map[string]string{"http://127.0.0.1:8080": "http://127.0.0.1:8080", "http://localhost:8080/": "http://localhost:8080",
		"http://sandboxd.localhost": "http://sandboxd.localhost", "http://[::1]:9000": "http://[::1]:9000",
		"https://sandboxes.example.com/": "https://sandboxes.example.com", "https://example.com/sbx/": "https://example.com/sbx"}
	for _, b := range bases {
		if res.Bases[b] != want[b] {
			t.Errorf("normalize_base(%q) = %q, want %q", b, res.Bases[b], want[b])
		}
	}
}
