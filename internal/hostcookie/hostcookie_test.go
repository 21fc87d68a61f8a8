package hostcookie

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSetNames: over https a cookie is __Host- prefixed, Secure, on
// Path=/ and without Domain (what browsers demand of the prefix); over
// http it keeps its plain name and path; a negative age deletes it.
func TestSetNames(t *testing.T) {
	for _, c := range []struct {
		name   string
		jar    Jar
		maxAge time.Duration
		want   string
	}{
		{"https", Jar{Secure: true}, time.Hour, "__Host-v=x; Path=/; Max-Age=3600; HttpOnly; Secure; SameSite=Lax"},
		{"http", Jar{}, time.Hour, "v=x; Path=/launch/; Max-Age=3600; HttpOnly; SameSite=Lax"},
		{"delete over https", Jar{Secure: true}, -1, "__Host-v=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Lax"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			c.jar.Set(w, "v", "x", "/launch/", c.maxAge)
			if got := w.Header().Get("Set-Cookie"); got != c.want {
				t.Fatalf("Set-Cookie %q, want %q", got, c.want)
			}
		})
	}
}

// TestSigned: only a value signed with the jar's key for the purpose is
// read, under the scheme's own name; a planted cookie sent first is
// skipped, not taken.
func TestSigned(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	https, http1 := Jar{Secure: true, Key: key}, Jar{Key: key}
	good := https.Sign("visitor", "abc")
	other := Jar{Key: []byte("another key, another cluster....")}.Sign("visitor", "abc")
	forged := "zzz" + good[strings.IndexByte(good, '.'):] // abc's MAC on another value
	for _, c := range []struct {
		name    string
		jar     Jar
		cookies string
		want    string
		ok      bool
	}{
		{"signed, right name", https, "__Host-v=" + good, "abc", true},
		{"plain name over https (a sibling can set it)", https, "v=" + good, "", false},
		{"__Host- name over http", http1, "__Host-v=" + good, "", false},
		{"signed over http", http1, "v=" + good, "abc", true},
		{"unsigned", https, "__Host-v=abc", "", false},
		{"MAC of another value", https, "__Host-v=" + forged, "", false},
		{"another purpose", https, "__Host-v=" + https.Sign("signin", "abc"), "", false},
		{"another key", https, "__Host-v=" + other, "", false},
		{"planted first, ours second", http1, "v=planted.AAAA; v=" + good, "abc", true},
		{"oversized", http1, "v=" + strings.Repeat("a", 600) + good, "", false},
		{"no key reads nothing", Jar{}, "v=" + Jar{}.Sign("visitor", "abc"), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "/", nil)
			r.Header.Set("Cookie", c.cookies)
			got, ok := c.jar.Signed(r, "v", "visitor")
			if got != c.want || ok != c.ok {
				t.Fatalf("Signed = %q, %v; want %q, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
