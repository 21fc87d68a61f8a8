package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// ctlRun is a sandboxctl process whose stderr lines are followed.
type ctlRun struct {
	cmd            *exec.Cmd
	mu             sync.Mutex
	stdout, stderr strings.Builder
	lines          chan string
	done           chan error
}

// startCtl starts sandboxctl with env (on top of the test's) and follows
// its stderr; the process is killed when the test ends if still running.
func startCtl(t *testing.T, env []string, args ...string) *ctlRun {
	t.Helper()
	r := &ctlRun{cmd: exec.Command(ctlBinary, args...), lines: make(chan string, 1000), done: make(chan error, 1)}
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout = writerFunc(func(b []byte) {
		r.mu.Lock()
		r.stdout.Write(b)
		r.mu.Unlock()
	})
	errPipe, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			r.mu.Lock()
			r.stderr.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			select {
			case r.lines <- sc.Text():
			default:
			}
		}
		r.done <- r.cmd.Wait()
	}()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
		}
	})
	return r
}

// waitLine returns the first stderr line starting with prefix.
func (r *ctlRun) waitLine(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l := <-r.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case err := <-r.done:
			r.done <- err
			t.Fatalf("sandboxctl exited (%v) before a %q line\n%s", err, prefix, r.output())
		case <-timeout:
			t.Fatalf("no %q line in %s\n%s", prefix, d, r.output())
		}
	}
}

// wait returns the exit code once the process ends.
func (r *ctlRun) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("sandboxctl: %v", err)
		}
		return 0
	case <-time.After(d):
		_ = r.cmd.Process.Kill()
		t.Fatalf("sandboxctl still running after %s\n%s", d, r.output())
	}
	return -1
}

func (r *ctlRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "stdout:\n" + r.stdout.String() + "stderr:\n" + r.stderr.String()
}

// liveDB connects to the live site's database as the node's MariaDB
// administrator.
func (d *devSystem) liveDB(t *testing.T, port, name string) *sql.DB {
	t.Helper()
	pw, err := os.ReadFile(filepath.Join(d.dir, "agent", "mariadb", "admin-password"))
	if err != nil {
		t.Fatal(err)
	}
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = "sandboxd", strings.TrimSpace(string(pw)), "tcp", "127.0.0.1:"+port, name
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestSandboxctlImportPush: a customer pushes a live WordPress directory
// (served by its own PHP server, with its own database, dumped to a
// file) with `sandboxctl imports push`, rate-limited; Ctrl-C after the
// first progress line stops it with exit code 130 and the server holds
// part of the archive; the same command again goes on from where the
// server is (not from 0) and the import becomes a sandbox that serves the
// live site's content at its own URL. The CLI's cache is empty at the end.
func TestSandboxctlImportPush(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	probe := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Probe"}).Must(t, 202)
	d.waitJob(t, probe.Str("jobId"))
	port := fmt.Sprint(d.owner.Do("GET", "/api/app/sites/"+probe.Str("site.id")+"/database", nil).Must(t, 200).Get("database.port"))
	live := startLiveSite(t, d, port)

	dumpFile := filepath.Join(t.TempDir(), "dump.sql")
	sqlDump := dump(t, d.liveDB(t, port, live.db))
	if !strings.Contains(string(sqlDump), "Live post") || !strings.Contains(string(sqlDump), live.url) {
		t.Fatal("the live dump lacks the post or the live URL")
	}
	if err := os.WriteFile(dumpFile, sqlDump, 0o600); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	env := []string{"SANDBOX_URL=" + d.owner.Base, "SANDBOX_TOKEN=" + d.owner.Token,
		"SANDBOXCTL_CONFIG=" + filepath.Join(t.TempDir(), "config.json"), "SANDBOXCTL_CACHE=" + cache}
	args := []string{"imports", "push", filepath.Join(live.dir, "wp"), "--sql", dumpFile, "--limit-rate", "512K", "--chunk-size", "256K"}

	// 1. Interrupted after the first progress line.
	first := startCtl(t, env, args...)
	first.waitLine(t, "uploaded ", 3*time.Minute)
	if err := first.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := first.wait(t, 30*time.Second); code != 130 {
		t.Fatalf("exit code %d after SIGINT, want 130\n%s", code, first.output())
	}
	out := first.output()
	m := regexp.MustCompile(`imports resume (imp_\w+)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "run the same command again") || !strings.Contains(out, "WP_HOME in wp-config.php") {
		t.Fatalf("no resume hint:\n%s", out)
	}
	id := m[1]
	imp := d.owner.Do("GET", "/api/app/imports/"+id, nil).Must(t, 200)
	size, _ := imp.Get("import.sizeBytes").(float64)
	got, _ := imp.Get("import.receivedBytes").(float64)
	status := imp.Str("import.status")
	if (status != "uploading" && status != "awaiting_upload") || got >= size || got <= 0 || imp.Str("import.sourceUrl") != live.url {
		t.Fatalf("the import after Ctrl-C: %s", imp.Raw)
	}
	t.Logf("interrupted at %.0f of %.0f bytes:\n%s", got, size, out)

	// 2. The same command goes on from there, to a ready sandbox.
	second := startCtl(t, env, args...)
	if code := second.wait(t, 8*time.Minute); code != 0 {
		t.Fatalf("resumed push exited %d\n%s", code, second.output())
	}
	out = second.output()
	t.Logf("the resumed push:\n%s", out)
	from := regexp.MustCompile(`resuming import ` + id + ` from byte (\d+)`).FindStringSubmatch(out)
	if from == nil || from[1] == "0" || strings.Contains(out, "packing") {
		t.Fatalf("the second run did not resume the upload:\n%s", out)
	}
	siteURL := regexp.MustCompile(`is ready: site \S+ at (\S+)`).FindStringSubmatch(out)
	if siteURL == nil || !strings.Contains(out, "log in (one-time link): ") {
		t.Fatalf("no site URL:\n%s", out)
	}
	imp = d.owner.Do("GET", "/api/app/imports/"+id, nil).Must(t, 200)
	if imp.Str("import.status") != "ready" || imp.Str("siteUrl") != siteURL[1] || imp.Str("import.sourceKind") != "archive" {
		t.Fatalf("the import: %s", imp.Raw)
	}
	code, page := served(t, siteURL[1]+"/")
	if code != 200 || !strings.Contains(page, "Live post") || !strings.Contains(page, "live-marker "+siteURL[1]+"/") || strings.Contains(page, live.url) {
		t.Fatalf("the sandbox's front page: %d %.800s", code, page)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "imports", "*")); len(left) != 0 {
		t.Fatalf("left in the CLI's cache: %v", left)
	}
	// The table lists it, within 80 columns.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list := exec.CommandContext(ctx, ctlBinary, "imports", "list")
	list.Env = append(os.Environ(), env...)
	table, err := list.Output()
	if err != nil || !strings.Contains(string(table), id) || !strings.Contains(string(table), "ready") {
		t.Fatalf("imports list: %v %s", err, table)
	}
	for _, l := range strings.Split(string(table), "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("imports list line over 80 columns: %q", l)
		}
	}
}
