// Command testsummary reads `go test -json` on stdin and writes what
// `go test` would have printed, then the slowest tests and packages, so
// that `make test` shows where its minutes go. It exits 1 when a test or
// a package failed (or printed no verdict), whatever go test's own status.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// assertion matches the lines a test's t.Error, t.Fatal and t.Log
// print ("    x_test.go:12: want 1, got 2"), and a panic's first line.
var assertion = regexp.MustCompile(`^\s+[\w.-]+_test\.go:\d+: |^panic: `)

// maxReasons bounds the closing list of failure lines: per test, and in all.
const maxReasons, maxAllReasons = 6, 60

type timing struct {
	name    string
	seconds float64
}

func main() {
	top := flag.Int("top", 10, "how many of the slowest tests to list")
	save := flag.String("save", "", "also write the go test -json stream to this file (every test's time)")
	flag.Parse()
	in := io.Reader(os.Stdin)
	if *save != "" {
		f, err := os.Create(*save)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(1)
		}
		defer f.Close()
		in = io.TeeReader(os.Stdin, f)
	}
	os.Exit(run(in, os.Stdout, *top))
}

func run(in io.Reader, out io.Writer, top int) int {
	var tests, packages []timing
	var failed []string
	// reasons are the assertion lines of the failed tests, repeated at the
	// end: a long failing test's output (a daemon's log) would otherwise
	// push them out of a reader's view of the output's last lines.
	var reasons []string
	started := map[string]bool{}
	verdict := map[string]bool{}
	held := map[string][]string{} // a running test's output, by package and test
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not test2json (a build error, say): pass it on as it is.
			fmt.Fprintln(out, string(line))
			continue
		}
		switch e.Action {
		case "start":
			started[e.Package] = true
		case "output":
			if e.Test == "" {
				// go test's own lines: "ok  pkg 1.2s", FAIL, a build
				// error, a panic outside any test.
				if e.Output != "PASS\n" {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			key := e.Package + " " + e.Test
			held[key] = append(held[key], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				verdict[e.Package] = true
				packages = append(packages, timing{short(e.Package), e.Elapsed})
				if e.Action == "fail" {
					failed = append(failed, short(e.Package))
				}
				continue
			}
			// A failed test's lines are printed as go test prints them;
			// a passing test's are dropped.
			key := e.Package + " " + e.Test
			if e.Action == "fail" {
				fmt.Fprint(out, strings.Join(held[key], ""))
				reasons = append(reasons, why(short(e.Package)+" "+e.Test, held[key])...)
			}
			delete(held, key)
			if !strings.Contains(e.Test, "/") {
				tests = append(tests, timing{short(e.Package) + " " + e.Test, e.Elapsed})
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary: read:", err)
		return 1
	}
	// A test binary killed by the timeout prints its running tests'
	// output before dying: show what was held, for the reader.
	for key, lines := range held {
		fmt.Fprintf(out, "(unfinished) %s:\n%s", key, strings.Join(lines, ""))
		pkg, test, _ := strings.Cut(key, " ")
		reasons = append(reasons, short(pkg)+" "+test+": unfinished (killed or timed out)")
	}
	for p := range started {
		if !verdict[p] {
			failed = append(failed, short(p)+" (no verdict: killed or timed out)")
		}
	}
	if len(reasons) > 0 {
		fmt.Fprintf(out, "\nwhy tests failed (their assertion lines, repeated):\n")
		for i, r := range reasons {
			if i == maxAllReasons {
				fmt.Fprintf(out, "  … %d more\n", len(reasons)-i)
				break
			}
			fmt.Fprintf(out, "  %s\n", r)
		}
	}
	fmt.Fprintf(out, "\nslowest tests:\n")
	list(out, tests, top)
	fmt.Fprintf(out, "slowest packages:\n")
	list(out, packages, 5)
	if len(failed) > 0 {
		sort.Strings(failed)
		fmt.Fprintf(out, "FAILED: %s\n", strings.Join(failed, ", "))
		return 1
	}
	return 0
}

// why picks a failed test's assertion lines, at most maxReasons of them,
// each prefixed with the test's name and cut to 300 bytes.
func why(name string, lines []string) []string {
	var out []string
	for _, l := range lines {
		if !assertion.MatchString(l) {
			continue
		}
		if len(out) == maxReasons {
			out = append(out, name+": …")
			break
		}
		l = strings.TrimSpace(l)
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		out = append(out, name+": "+l)
	}
	return out
}

func list(out io.Writer, ts []timing, n int) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].seconds > ts[j].seconds })
	for _, t := range ts[:min(n, len(ts))] {
		fmt.Fprintf(out, "  %8s  %s\n", time.Duration(t.seconds*float64(time.Second)).Round(100*time.Millisecond), t.name)
	}
}

func short(pkg string) string {
	if i := strings.Index(pkg, "/sandboxd/sandboxd/"); i >= 0 {
		return pkg[i+len("/sandboxd/sandboxd/"):]
	}
	if strings.HasSuffix(pkg, "/sandboxd/sandboxd") {
		return "."
	}
	return pkg
}
