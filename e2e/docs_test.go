package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/hostclaim"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// The documentation's shell blocks are tests (docs/README.md says how a
// page marks them): TestDocs runs every page's ```sh blocks against the
// shared dev system, TestOperatingFleetWalkthrough runs operating.md's
// fleet walk-through on this machine and checks it left nothing behind.

// docBlock is one fenced block of a page.
type docBlock struct {
	file   string // relative to the repository's root
	line   int    // of the opening fence
	lang   string // the fence's info string
	marker string // "", "fleet" or "not run"
	reason string // why a block is not run
	body   string
}

// runs reports whether TestDocs runs the block.
func (b docBlock) runs() bool { return (b.lang == "sh" || b.lang == "bash") && b.marker == "" }

var (
	fenceRE  = regexp.MustCompile("^```(.*)$")
	markerRE = regexp.MustCompile(`^<!-- (not run: (.+)|run: fleet) -->$`)
	// kinds are the info strings a fence may carry; sh and bash run.
	kinds = map[string]bool{"sh": true, "bash": true, "console": true, "text": true, "json": true, "yaml": true, "python": true}
)

// repoRoot is the repository's root (the e2e tests run in e2e/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// docPages are README.md and every page under docs/, relative to root.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages under docs/: %v", err)
	}
	out := []string{"README.md"}
	for _, p := range pages {
		out = append(out, strings.TrimPrefix(p, root+"/"))
	}
	return out
}

// parseBlocks reads a page's fenced blocks, each with the marker on the
// line before its fence. A marker anywhere else, a fence of no known
// kind or an unclosed block is an error.
func parseBlocks(root, file string) ([]docBlock, error) {
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	var blocks []docBlock
	var cur *docBlock
	var body []string
	prev := ""
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		if cur != nil {
			if strings.TrimSpace(line) == "```" {
				cur.body = strings.Join(body, "\n") + "\n"
				blocks = append(blocks, *cur)
				cur, body, prev = nil, nil, ""
				continue
			}
			body = append(body, line)
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			lang := strings.TrimSpace(m[1])
			if !kinds[lang] {
				return nil, fmt.Errorf("%s:%d: a fence of kind %q (name one of sh, bash, console, text, json, yaml, python)", file, n, lang)
			}
			cur = &docBlock{file: file, line: n, lang: lang}
			if mm := markerRE.FindStringSubmatch(prev); mm != nil {
				if mm[2] != "" {
					cur.marker, cur.reason = "not run", mm[2]
				} else {
					cur.marker = "fleet"
				}
				if lang != "sh" && lang != "bash" {
					return nil, fmt.Errorf("%s:%d: a run marker on a %s block", file, n, lang)
				}
			}
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(prev), "<!-- not run") || strings.HasPrefix(strings.TrimSpace(prev), "<!-- run") {
			if !markerRE.MatchString(prev) {
				return nil, fmt.Errorf("%s:%d: a malformed marker %q (<!-- not run: the reason --> or <!-- run: fleet -->)", file, n-1, prev)
			}
			return nil, fmt.Errorf("%s:%d: the marker %q is not right before a fence", file, n-1, prev)
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the block is never closed", file, cur.line)
	}
	return blocks, nil
}

// docScript is the bash a page's blocks run as: strict, tracing each
// command, with curl failing on an HTTP error unless the line checks the
// status itself (-f, or -w as lines that show an error do). A marker
// line before each block says where it comes from.
func docScript(blocks []docBlock) string {
	var s strings.Builder
	s.WriteString(`set -euo pipefail
curl() {
  local a
  for a in "$@"; do
    case $a in
      -w|--write-out|--fail|--fail-with-body|-[a-zA-Z]*f*) command curl "$@"; return ;;
    esac
  done
  command curl -S --fail-with-body "$@"
}
PS4='+ '
set -x
`)
	for _, b := range blocks {
		fmt.Fprintf(&s, ": block %s:%d\n%s", b.file, b.line, b.body)
	}
	return s.String()
}

// runScript runs script with bash in dir (output to dir/out.log) and
// returns the output; the whole process group is killed when ctx ends.
func runScript(ctx context.Context, dir, script string, env []string) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, ".docs.sh"), []byte(script), 0o600); err != nil {
		return "", err
	}
	out, err := os.Create(filepath.Join(dir, ".docs.log"))
	if err != nil {
		return "", err
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, "bash", ".docs.sh")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	runErr := cmd.Run()
	b, err := os.ReadFile(out.Name())
	if err != nil {
		return "", err
	}
	return string(b), runErr
}

// failedBlock names the block a failed script was in: the last marker
// its trace shows.
func failedBlock(out string) string {
	at := "before the first block"
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "+ : block "); ok {
			at = "the block at " + l
		}
	}
	return at
}

// lastLines is the end of a long output.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// docEnv is the environment a page runs in: this process's, without
// anything of sandboxd's own that would change what the page does.
func docEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SANDBOX") || strings.HasPrefix(k, "XDG_") || k == "HOME" || k == "NO_COLOR" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// sshShim keeps ssh and sftp to $HOME/.ssh (they read the password
// database's home, not $HOME).
const sshShim = `#!/bin/sh
exec /usr/bin/$(basename "$0") -F /dev/null -o UserKnownHostsFile="$HOME/.ssh/known_hosts" \
  -o IdentityFile="$HOME/.ssh/id_ed25519" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes "$@"
`

// checkout makes dir look like a checkout after `make run`: bin/ holds
// the binaries under test.
func checkout(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"sandboxd": binary, "sandboxctl": ctlBinary} {
		if err := os.Symlink(target, filepath.Join(dir, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDocs runs the shell blocks of README.md and docs/*.md against the
// shared dev system, each page as a fresh paid account of its own (a
// few pages at once), after checking the pages' layout and links.
func TestDocs(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	root := repoRoot(t)
	pages := docPages(t, root)
	byPage := map[string][]docBlock{}
	for _, p := range pages {
		blocks, err := parseBlocks(root, p)
		if err != nil {
			t.Fatal(err)
		}
		byPage[p] = blocks
		for _, b := range blocks {
			if b.marker == "not run" {
				t.Logf("not run: %s:%d: %s", b.file, b.line, b.reason)
			}
			if b.marker == "fleet" && p != "docs/operating.md" {
				t.Errorf("%s:%d: only operating.md has the fleet walk-through", b.file, b.line)
			}
			if !b.runs() && b.marker != "fleet" {
				continue
			}
			for i, l := range strings.Split(b.body, "\n") {
				if code, _, _ := strings.Cut(l, "#"); strings.Contains(code, "…") {
					t.Errorf("%s:%d: a placeholder (…) in a block that runs: %s", b.file, b.line+1+i, l)
				}
			}
		}
	}
	checkLayout(t, root, pages, byPage)
	if t.Failed() {
		return
	}
	// What the blocks call beside coreutils (deploy/dev/install-deps.sh
	// installs them; openssl comes with ca-certificates).
	for _, tool := range []string{"bash", "curl", "jq", "openssl", "python3", "tar", "mysqldump", "ssh", "sftp", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			hosttest.Missing(t, "the docs' shell blocks need %s on the PATH", tool)
		}
	}

	// The README's first block (make run, make test) starts the system
	// the others run against.
	byPage["README.md"] = byPage["README.md"][1:]
	slots := make(chan struct{}, 4)
	for _, p := range pages {
		var blocks []docBlock
		for _, b := range byPage[p] {
			if b.runs() {
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			continue
		}
		name := strings.ReplaceAll(strings.TrimPrefix(p, "docs/"), "/", "-")
		if p == "docs/README.md" {
			name = "docs-README.md"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			runDocPage(t, blocks)
		})
	}
}

// runDocPage runs one page's blocks in a checkout-like directory whose
// .data/ points at the shared dev system as a new account.
func runDocPage(t *testing.T, blocks []docBlock) {
	d := sharedDev(t)
	dir := t.TempDir()
	checkout(t, dir)
	api := "http://" + d.api
	files := map[string]string{
		".data/dev.env":        "SANDBOX_URL=" + api + "\nSANDBOX_TOKEN=" + d.owner.Token + "\n",
		".data/api-url":        api + "\n",
		".data/operator-token": system.operator + "\n",
		".shims/ssh":           sshShim,
		".shims/sftp":          sshShim,
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	// The environment a reader's second shell has: no SANDBOX_* until a
	// page sources .data/dev.env, sandboxd's binaries in bin/ (not on the
	// PATH until a page puts them there).
	env := docEnv("HOME="+home, "PATH="+filepath.Join(dir, ".shims")+":"+os.Getenv("PATH"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := runScript(ctx, dir, docScript(blocks), env)
	if err != nil {
		t.Fatalf("%s failed after %v (%v); its last lines:\n%s", failedBlock(out), time.Since(start).Round(time.Second), err, lastLines(out, 120))
	}
	t.Logf("%d blocks of %s ran in %v", len(blocks), blocks[0].file, time.Since(start).Round(time.Second))
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// checkLayout keeps the pages walkable: the README short and starting
// with its set-up block, long pages with a table of contents, and every
// relative link (and its #anchor) pointing at something that is there.
func checkLayout(t *testing.T, root string, pages []string, byPage map[string][]docBlock) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 250 {
		t.Errorf("README.md has %d lines: keep it to 250, and move the rest under docs/", n)
	}
	if !strings.HasPrefix(string(readme), "# sandboxd\n\n```sh\nmake run ") {
		t.Error("README.md must begin with its title and the make run / make test block")
	}
	if rb := byPage["README.md"]; len(rb) == 0 || !strings.HasPrefix(rb[0].body, "make run ") {
		t.Error("README.md's first block is not the make run / make test block")
	}
	for _, p := range pages[1:] {
		if !strings.Contains(string(readme), "]("+p+")") {
			t.Errorf("README.md does not link to %s", p)
		}
	}
	anchors := map[string]map[string]bool{}
	for _, p := range pages {
		anchors[p] = headingAnchors(t, root, p)
	}
	for _, p := range pages {
		b, _ := os.ReadFile(filepath.Join(root, p))
		text := string(b)
		if p != "README.md" && strings.Count(text, "\n## ") >= 4 && !strings.Contains(text, "](#") {
			t.Errorf("%s has %d sections and no table of contents", p, strings.Count(text, "\n## "))
		}
		// Links inside code blocks are code, not links.
		for _, blk := range byPage[p] {
			text = strings.Replace(text, blk.body, "", 1)
		}
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(link, "#")
			page := p
			if target != "" {
				abs := filepath.Join(root, filepath.Dir(p), target)
				rel, err := filepath.Rel(root, abs)
				if err != nil {
					t.Errorf("%s: link %s: %v", p, link, err)
					continue
				}
				if strings.HasPrefix(rel, "../") {
					// Outside the repository: only the steering repository's
					// shared/, beside it.
					if !strings.HasPrefix(rel, "../shared/") {
						t.Errorf("%s: link %s leaves the repository for %s", p, link, rel)
					}
					continue
				}
				if _, err := os.Stat(abs); err != nil {
					t.Errorf("%s: link %s: %v", p, link, err)
					continue
				}
				page = rel
			}
			if anchor == "" {
				continue
			}
			a, ok := anchors[page]
			if !ok {
				a = headingAnchors(t, root, page)
			}
			if !a[anchor] {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s", p, link, page, anchor)
			}
		}
	}
}

// headingAnchors are the anchors GitHub makes of a Markdown page's
// headings (outside code blocks).
func headingAnchors(t *testing.T, root, page string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if !strings.HasSuffix(page, ".md") {
		return out
	}
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Errorf("%s: %v", page, err)
		return out
	}
	inCode := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(l, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var a strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		anchor := a.String()
		for n := 1; out[anchor]; n++ {
			anchor = fmt.Sprintf("%s-%d", a.String(), n)
		}
		out[anchor] = true
	}
	return out
}

// fleetDir is where operating.md's walk-through keeps everything.
const fleetDir = "/tmp/fleet"

// TestOperatingFleetWalkthrough runs operating.md's fleet walk-through as
// written: three servers joined by tokens, two agents and an edge on this
// machine's loopback, a site served through the edge, a lost node, a
// drain, an upgrade, and each agent stopped and purged; then it checks
// that nothing of the fleet is left on the host.
func TestOperatingFleetWalkthrough(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	root := repoRoot(t)
	all, err := parseBlocks(root, "docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	for _, b := range all {
		if b.marker == "fleet" {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) < 5 {
		t.Fatalf("operating.md has %d fleet blocks", len(blocks))
	}
	if _, err := os.Stat(fleetDir); !os.IsNotExist(err) {
		t.Fatalf("%s is there already (another walk-through, or one left behind): %v", fleetDir, err)
	}
	agents := []string{filepath.Join(fleetDir, "a1"), filepath.Join(fleetDir, "a2")}
	// Should the walk-through stop half-way, nothing of it stays: its
	// processes (their pids are in the fleet's dir), then what the agents
	// left.
	t.Cleanup(func() {
		if _, err := os.Stat(fleetDir); os.IsNotExist(err) {
			return
		}
		pids, _ := filepath.Glob(filepath.Join(fleetDir, "*.pid"))
		for _, p := range pids {
			var pid int
			if b, err := os.ReadFile(p); err == nil {
				_, _ = fmt.Sscan(string(b), &pid)
			}
			if pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, a := range agents {
			if _, err := os.Stat(a); err == nil {
				if err := agent.Purge(ctx, a, ""); err != nil {
					t.Errorf("purge %s: %v", a, err)
				}
			}
		}
		if err := os.RemoveAll(fleetDir); err != nil {
			t.Error(err)
		}
	})
	dir := t.TempDir()
	checkout(t, dir)
	// The agents read the image cache `make images` filled, under the
	// real HOME.
	env := append(docEnv("PATH="+os.Getenv("PATH")), "HOME="+os.Getenv("HOME"))
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := runScript(ctx, dir, docScript(blocks), env)
	if err != nil {
		for _, f := range []string{"s1", "s2", "s3", "a1", "a2", "e1"} {
			if b, err := os.ReadFile(filepath.Join(fleetDir, f+".log")); err == nil {
				var keep []string
				for _, l := range strings.Split(string(b), "\n") {
					if !strings.Contains(l, `"msg":"request"`) {
						keep = append(keep, l)
					}
				}
				t.Logf("%s.log ends (access log left out):\n%s", f, lastLines(strings.Join(keep, "\n"), 40))
			}
		}
		t.Fatalf("%s failed after %v (%v); its last lines:\n%s", failedBlock(out), time.Since(start).Round(time.Second), err, lastLines(out, 120))
	}
	t.Logf("the walk-through ran in %v", time.Since(start).Round(time.Second))
	for _, want := range []string{"<title>Fleet One", "<title>Fleet Two", ": moved to a2", "purged: everything stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("the walk-through never printed %q", want)
		}
	}

	// Nothing is left: the data dirs, processes, mounts, nftables tables,
	// bridges and host claims.
	if _, err := os.Stat(fleetDir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", fleetDir, err)
	}
	if procs := processesUnder(fleetDir); len(procs) > 0 {
		t.Errorf("processes of the fleet still run: %v", procs)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), fleetDir+"/") {
		t.Errorf("mounts left under %s", fleetDir)
	}
	tables, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		name := agent.NetworkName(a)
		if strings.Contains(string(tables), "sandboxd_"+name) {
			t.Errorf("nftables tables of %s left: sandboxd_%s", a, name)
		}
		if _, err := net.InterfaceByName("sbx" + name); err == nil {
			t.Errorf("the bridge sbx%s of %s is left", name, a)
		}
	}
	claims, _ := filepath.Glob(filepath.Join(hostclaim.DefaultDir, "*", "*"))
	for _, c := range claims {
		if owner, _ := os.ReadFile(c); strings.HasPrefix(string(owner), fleetDir+"/") {
			t.Errorf("claim %s still held for %s", c, owner)
		}
	}
}

// processesUnder lists the processes whose command line names dir
// (sandboxd, its containerd and shims), as "pid: command line".
func processesUnder(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmdline, dir+"/") || strings.HasSuffix(strings.TrimSpace(cmdline), dir) {
			out = append(out, e.Name()+": "+cmdline)
		}
	}
	return out
}
