package urlrewrite

import (
	"strconv"
	"strings"
	"testing"
)

const (
	oldURL = "http://old.localhost:8081"
	newURL = "http://copy-7f3a.localhost:8081"
)

func mustNew(t testing.TB, o, n string) *Rewriter {
	t.Helper()
	r, err := New(o, n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ser is PHP's serialize() of a string.
func ser(s string) string { return "s:" + strconv.Itoa(len(s)) + `:"` + s + `";` }

func TestText(t *testing.T) {
	r := mustNew(t, oldURL, newURL)
	tests := []struct{ name, in, want string }{
		{"plain", `<a href="http://old.localhost:8081/wp-admin/">`, `<a href="http://copy-7f3a.localhost:8081/wp-admin/">`},
		{"end of value", "http://old.localhost:8081", newURL},
		{"https form", "https://old.localhost:8081/x", "http://copy-7f3a.localhost:8081/x"},
		{"upper case host", "HTTP://OLD.localhost:8081/x", "http://copy-7f3a.localhost:8081/x"},
		{"json escaped", `{"url":"http:\/\/old.localhost:8081\/wp-content\/a.jpg"}`, `{"url":"http:\/\/copy-7f3a.localhost:8081\/wp-content\/a.jpg"}`},
		{"url encoded", "redirect_to=http%3A%2F%2Fold.localhost%3A8081%2Fwp-admin", "redirect_to=http%3A%2F%2Fcopy-7f3a.localhost%3A8081%2Fwp-admin"},
		{"url encoded lower case", "u=http%3a%2f%2fold.localhost%3a8081%2f", "u=http%3a%2f%2fcopy-7f3a.localhost%3a8081%2f"},
		{"protocol relative", `<img src="//old.localhost:8081/a.png">`, `<img src="//copy-7f3a.localhost:8081/a.png">`},
		{"json protocol relative", `"\/\/old.localhost:8081\/a"`, `"\/\/copy-7f3a.localhost:8081\/a"`},
		{"several", "http://old.localhost:8081 and //old.localhost:8081/", "http://copy-7f3a.localhost:8081 and //copy-7f3a.localhost:8081/"},
		{"query and fragment", "http://old.localhost:8081?p=1#c", "http://copy-7f3a.localhost:8081?p=1#c"},
		// Not the old origin: left alone.
		{"longer port", "http://old.localhost:80812/", "http://old.localhost:80812/"},
		{"longer host", "http://old.localhost:8081.evil.test/", "http://old.localhost:8081.evil.test/"},
		{"host suffix", "http://xold.localhost:8081/", "http://xold.localhost:8081/"},
		{"other port", "http://old.localhost:9090/", "http://old.localhost:9090/"},
		{"bare host", "admin@old.localhost:8081", "admin@old.localhost:8081"},
		{"nothing", "WordPress", "WordPress"},
		{"multibyte around", "été http://old.localhost:8081/ü", "été http://copy-7f3a.localhost:8081/ü"},
	}
	for _, tt := range tests {
		if got := r.Value(tt.in); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// TestOriginWithoutPort: another port of a host given without one is
// another site; a path in the old URL must end where the path ends.
func TestOriginWithoutPort(t *testing.T) {
	r := mustNew(t, "https://example.com", "https://copy.example.org")
	for in, want := range map[string]string{
		"https://example.com/":      "https://copy.example.org/",
		"http://example.com":        "https://copy.example.org",
		"https://example.com:8443/": "https://example.com:8443/",
		"https://example.community": "https://example.community",
		"https://www.example.com/":  "https://www.example.com/",
		"https://example.com:/x":    "https://copy.example.org:/x",
	} {
		if got := r.Value(in); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
	p := mustNew(t, "http://example.com/blog", "http://example.com/copy")
	for in, want := range map[string]string{
		"http://example.com/blog/2024/": "http://example.com/copy/2024/",
		"http://example.com/blogroll":   "http://example.com/blogroll",
		"http://example.com/":           "http://example.com/",
	} {
		if got := p.Value(in); got != want {
			t.Errorf("%s: got %s, want %s", in, got, want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for _, u := range []string{"", "example.com", "ftp://example.com", "http://", "http://a@example.com", "http://example.com/?x=1", "http://example.com/#x"} {
		if _, err := New(u, newURL); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

// TestSerialized: lengths follow the rewrite at every level, with the
// shapes real plugins store.
func TestSerialized(t *testing.T) {
	r := mustNew(t, oldURL, newURL)
	o, n := oldURL, newURL
	tests := []struct{ name, in, want string }{
		{"siteurl-like string", ser(o), ser(n)},
		{"array", "a:2:{" + ser("home") + ser(o+"/") + ser("n") + "i:5;}", "a:2:{" + ser("home") + ser(n+"/") + ser("n") + "i:5;}"},
		{"widget", "a:2:{i:2;a:3:{" + ser("title") + ser("") + ser("text") + ser(`<a href="`+o+`/shop">Shop</a>`) + ser("filter") + "b:1;}" + ser("_multiwidget") + "i:1;}",
			"a:2:{i:2;a:3:{" + ser("title") + ser("") + ser("text") + ser(`<a href="`+n+`/shop">Shop</a>`) + ser("filter") + "b:1;}" + ser("_multiwidget") + "i:1;}"},
		{"theme mods", "a:3:{i:0;b:0;" + ser("header_image") + ser(o+"/wp-content/uploads/h.jpg") + ser("header_image_data") + `O:8:"stdClass":2:{` + ser("url") + ser(o+"/wp-content/uploads/h.jpg") + ser("width") + "d:1200.5;}}",
			"a:3:{i:0;b:0;" + ser("header_image") + ser(n+"/wp-content/uploads/h.jpg") + ser("header_image_data") + `O:8:"stdClass":2:{` + ser("url") + ser(n+"/wp-content/uploads/h.jpg") + ser("width") + "d:1200.5;}}"},
		{"double serialized", ser("a:1:{i:0;" + ser(o) + "}"), ser("a:1:{i:0;" + ser(n) + "}")},
		{"json inside serialized", ser(`[{"url":"http:\/\/old.localhost:8081\/x"}]`), ser(`[{"url":"http:\/\/copy-7f3a.localhost:8081\/x"}]`)},
		{"string holding quotes and semicolons", ser(`";}` + o + `";s:1:"`), ser(`";}` + n + `";s:1:"`)},
		{"custom serializable", `C:11:"ArrayObject":` + strconv.Itoa(len("x:i:0;a:1:{i:0;"+ser(o)+"};m:a:0:{}")) + ":{x:i:0;a:1:{i:0;" + ser(o) + "};m:a:0:{}}",
			`C:11:"ArrayObject":` + strconv.Itoa(len("x:i:0;a:1:{i:0;"+ser(n)+"};m:a:0:{}")) + ":{x:i:0;a:1:{i:0;" + ser(n) + "};m:a:0:{}}"},
		{"null, enum, references", "a:3:{i:0;N;i:1;" + `E:11:"Suit:Hearts";` + "i:2;R:2;}", "a:3:{i:0;N;i:1;" + `E:11:"Suit:Hearts";` + "i:2;R:2;}"},
		{"private property", `O:1:"A":1:{` + ser("\x00A\x00url") + ser(o) + "}", `O:1:"A":1:{` + ser("\x00A\x00url") + ser(n) + "}"},
		// Broken lengths are no serialized data: rewritten as text.
		{"broken lengths", `s:3:"` + o + `";`, `s:3:"` + n + `";`},
	}
	for _, tt := range tests {
		if got := r.Value(tt.in); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

// TestPageBuilderShapes: block markup and page-builder JSON in post
// content are text with escaped forms.
func TestPageBuilderShapes(t *testing.T) {
	r := mustNew(t, oldURL, newURL)
	in := `<!-- wp:image {"id":5,"url":"` + oldURL + `/wp-content/uploads/a.jpg"} --><figure><img src="` + oldURL + `/wp-content/uploads/a.jpg"/></figure><!-- /wp:image -->` +
		`[{"id":"1a","elType":"widget","settings":{"image":{"url":"http:\/\/old.localhost:8081\/wp-content\/uploads\/b.png","id":7},"link":{"url":"http%3A%2F%2Fold.localhost%3A8081%2Fshop"}}}]`
	got := r.Value(in)
	if strings.Contains(got, "old.localhost") || strings.Count(got, "copy-7f3a.localhost") != 4 {
		t.Fatalf("got %s", got)
	}
}

func BenchmarkValueNoMatch(b *testing.B) {
	r := mustNew(b, oldURL, newURL)
	s := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 100)
	for b.Loop() {
		r.Value(s)
	}
}
