package urlrewrite

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// phpWorker is a PHP process running testdata/worker.php: real
// serialize() and unserialize(), one line in, one line out.
type phpWorker struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

var (
	workerOnce sync.Once
	worker     *phpWorker
	workerErr  error
)

// php returns the package's PHP worker, failing (never skipping) when PHP
// is not installed: deploy/dev/install-deps.sh installs php-cli.
func php(t testing.TB) *phpWorker {
	t.Helper()
	workerOnce.Do(func() {
		bin, err := exec.LookPath("php")
		if err != nil {
			workerErr = fmt.Errorf("php is not installed (deploy/dev/install-deps.sh installs php-cli): %w", err)
			return
		}
		w := &phpWorker{cmd: exec.Command(bin, "-n", "testdata/worker.php")}
		if w.in, workerErr = w.cmd.StdinPipe(); workerErr != nil {
			return
		}
		stdout, err := w.cmd.StdoutPipe()
		if err != nil {
			workerErr = err
			return
		}
		w.out = bufio.NewReaderSize(stdout, 1<<20)
		if workerErr = w.cmd.Start(); workerErr == nil {
			worker = w
		}
	})
	if workerErr != nil {
		t.Fatal(workerErr)
	}
	return worker
}

func (w *phpWorker) ask(t testing.TB, fields ...string) string {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := io.WriteString(w.in, strings.Join(fields, " ")+"\n"); err != nil {
		t.Fatalf("php worker: %v", err)
	}
	line, err := w.out.ReadString('\n')
	if err != nil {
		t.Fatalf("php worker: %v", err)
	}
	return strings.TrimSuffix(line, "\n")
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// serialize has PHP serialize the JSON value v (objects as stdClass).
func (w *phpWorker) serialize(t testing.TB, v any) string {
	t.Helper()
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	ans := w.ask(t, "S", b64(string(j)))
	if strings.HasPrefix(ans, "err ") {
		t.Fatalf("php serialize of %s: %s", j, ans)
	}
	out, err := base64.StdEncoding.DecodeString(ans)
	if err != nil {
		t.Fatalf("php serialize of %s: %v", j, err)
	}
	return string(out)
}

// check has PHP unserialize s and compare it with the JSON value want.
func (w *phpWorker) check(t testing.TB, s string, want any) string {
	t.Helper()
	j, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	return w.ask(t, "C", b64(s), b64(string(j)))
}

// expect is v with every string (map keys included) rewritten, as the
// serialized form must unserialize to.
func expect(r *Rewriter, v any) any {
	switch x := v.(type) {
	case string:
		return r.Value(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = expect(r, e)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[r.Value(k)] = expect(r, e)
		}
		return out
	}
	return v
}

// leaves are strings real options hold: every form of the old URL, near
// misses, text that looks like serialized syntax, multibyte text.
var leaves = []string{
	oldURL, oldURL + "/wp-content/uploads/2024/01/a.jpg", "https://old.localhost:8081/?p=12",
	`http:\/\/old.localhost:8081\/shop`, "http%3A%2F%2Fold.localhost%3A8081%2F", "//old.localhost:8081/x.css",
	"http://old.localhost:80812/", "http://old.localhost:8081.evil.test", "old.localhost:8081",
	`";}s:5:"`, "a:1:{", "été ☃ 😀", "", "0", "Hello, World", `<a href="` + oldURL + `">` + oldURL + `</a>`,
}

// randomValue builds a nested JSON value from rng, with leaf among its
// strings; some strings are themselves serialized data (by PHP).
func randomValue(t testing.TB, w *phpWorker, rng *rand.Rand, leaf string, depth int) any {
	pick := func() string {
		if rng.IntN(4) == 0 {
			return leaf
		}
		return leaves[rng.IntN(len(leaves))]
	}
	switch k := rng.IntN(10); {
	case depth > 3 || k < 3:
		return pick()
	case k == 3:
		return rng.IntN(1000) - 500
	case k == 4:
		return []any{nil, true, 1.5}[rng.IntN(3)]
	case k == 5 && depth < 3:
		// WordPress double-serializes: a serialized value inside a string.
		return w.serialize(t, randomValue(t, w, rng, leaf, depth+2))
	case k < 8:
		n := rng.IntN(4)
		list := make([]any, n)
		for i := range list {
			list[i] = randomValue(t, w, rng, leaf, depth+1)
		}
		return list
	default:
		m := map[string]any{}
		for i := range rng.IntN(4) {
			key := fmt.Sprintf("k%d", i)
			if rng.IntN(5) == 0 {
				// A key holding a URL; PHP objects refuse a property name
				// that starts with NUL.
				key = strings.TrimLeft(pick(), "\x00") + key
			}
			m[key] = randomValue(t, w, rng, leaf, depth+1)
		}
		return m
	}
}

// roundTrip has PHP serialize v, rewrites that, and has PHP unserialize
// the result: it must be v with the URL moved.
func roundTrip(t testing.TB, w *phpWorker, r *Rewriter, v any) {
	t.Helper()
	s := w.serialize(t, v)
	got := r.Value(s)
	if res := w.check(t, got, expect(r, v)); res != "ok" {
		t.Fatalf("%s\n serialized %q\n rewritten  %q", res, s, got)
	}
	if again := r.Value(got); again != got {
		t.Fatalf("a match of the old URL is left in %q", got)
	}
}

// TestRandomValuesThroughPHP: 300 nested values (arrays, objects,
// serialized strings within strings, URLs in keys) serialized by PHP,
// rewritten, unserialized by PHP without error to the same structure
// with the new URL.
func TestRandomValuesThroughPHP(t *testing.T) {
	w := php(t)
	r := mustNew(t, oldURL, newURL)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		roundTrip(t, w, r, randomValue(t, w, rng, leaves[rng.IntN(len(leaves))], 0))
	}
}

// FuzzRewriteThroughPHP: any leaf string, inside any generated structure,
// survives PHP's unserialize after the rewrite. `go test` runs the seeds;
// `go test -fuzz FuzzRewriteThroughPHP` explores.
func FuzzRewriteThroughPHP(f *testing.F) {
	for i, l := range leaves {
		f.Add(uint64(i), l)
	}
	f.Fuzz(func(t *testing.T, seed uint64, leaf string) {
		if !utf8Valid(leaf) {
			return // JSON, the worker's carrier, holds text only
		}
		w := php(t)
		r := mustNew(t, oldURL, newURL)
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		roundTrip(t, w, r, randomValue(t, w, rng, leaf, 0))
	})
}

// FuzzValueNeverBreaksSerialized: for any input, a value this package
// reads as serialized data stays serialized data after the rewrite, and
// a second rewrite changes nothing (the new URL holds no old one).
func FuzzValueNeverBreaksSerialized(f *testing.F) {
	f.Add(ser(oldURL))
	f.Add("a:1:{i:0;" + ser(oldURL) + "}")
	f.Add(`O:8:"stdClass":1:{` + ser("u") + ser("//old.localhost:8081") + "}")
	f.Add(`C:3:"Foo":` + "4:{abcd}")
	f.Fuzz(func(t *testing.T, s string) {
		r := mustNew(t, oldURL, newURL)
		got := r.Value(s)
		if _, ok := r.serialized(s); ok {
			if _, ok := (&Rewriter{}).serialized(got); !ok && looksSerialized(got) {
				t.Fatalf("rewrite broke serialized data: %q -> %q", s, got)
			}
		}
		if again := r.Value(got); again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, got, again)
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
