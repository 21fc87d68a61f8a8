package main

import (
	"strings"
	"testing"
)

const pkg = "github.com/sandboxd/sandboxd/"

func stream(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func TestSummary(t *testing.T) {
	passing := stream(
		`{"Action":"start","Package":"`+pkg+`a"}`,
		`{"Action":"run","Package":"`+pkg+`a","Test":"TestQuick"}`,
		`{"Action":"output","Package":"`+pkg+`a","Test":"TestQuick","Output":"noise of a passing test\n"}`,
		`{"Action":"pass","Package":"`+pkg+`a","Test":"TestQuick","Elapsed":0.5}`,
		`{"Action":"pass","Package":"`+pkg+`a","Test":"TestSlow","Elapsed":42}`,
		`{"Action":"pass","Package":"`+pkg+`a","Test":"TestSlow/sub","Elapsed":41}`,
		`{"Action":"output","Package":"`+pkg+`a","Output":"PASS\n"}`,
		`{"Action":"output","Package":"`+pkg+`a","Output":"ok  \t`+pkg+`a\t42.6s\n"}`,
		`{"Action":"pass","Package":"`+pkg+`a","Elapsed":42.6}`)
	failing := stream(
		`{"Action":"start","Package":"`+pkg+`b"}`,
		`{"Action":"output","Package":"`+pkg+`b","Test":"TestBroken","Output":"    b_test.go:9: want 1, got 2\n"}`,
		`{"Action":"output","Package":"`+pkg+`b","Test":"TestBroken","Output":"--- FAIL: TestBroken (1.00s)\n"}`,
		`{"Action":"fail","Package":"`+pkg+`b","Test":"TestBroken","Elapsed":1}`,
		`{"Action":"fail","Package":"`+pkg+`b","Elapsed":1.1}`)
	killed := stream(
		`{"Action":"start","Package":"`+pkg+`c"}`,
		`{"Action":"output","Package":"`+pkg+`c","Test":"TestHangs","Output":"last words\n"}`)
	for _, tc := range []struct {
		name string
		in   string
		code int
		want []string
		not  []string
	}{
		{"all pass", passing, 0, []string{"ok  \t" + pkg + "a\t42.6s", "slowest tests:", "42s  a TestSlow", "500ms  a TestQuick", "slowest packages:"},
			[]string{"noise of a passing test", "PASS\n", "TestSlow/sub", "FAILED", "why tests failed"}},
		{"a test fails", passing + failing, 1, []string{"want 1, got 2", "--- FAIL: TestBroken", "FAILED: b",
			"why tests failed (their assertion lines, repeated):\n  b TestBroken: b_test.go:9: want 1, got 2\n"}, nil},
		{"a binary is killed", passing + killed, 1, []string{"(unfinished) " + pkg + "c TestHangs:\nlast words", "FAILED: c (no verdict", "c TestHangs: unfinished"}, nil},
		{"a build error", "# " + pkg + "d\nd.go:1: syntax error\n" + `{"Action":"fail","Package":"` + pkg + `d","Elapsed":0}` + "\n", 1,
			[]string{"d.go:1: syntax error", "FAILED: d"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if code := run(strings.NewReader(tc.in), &out, 10); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("output has %q:\n%s", n, out.String())
				}
			}
		})
	}
}
