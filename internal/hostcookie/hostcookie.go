// Package hostcookie sets and reads the API host's own cookies so that
// no other host can plant one. A sandbox site's PHP may set cookies for
// its parent domain, and the browser then sends them to the API host
// too, under the same names. Over https every cookie here is named with
// the __Host- prefix (Secure, Path=/, no Domain), which browsers accept
// only from the host itself; a plain-named cookie is not read there.
// Values can also be signed, so only values this service minted are
// read back, whatever the scheme.
package hostcookie

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"time"
)

// HostPrefix is the name prefix browsers accept only from the host
// itself, with Secure, Path=/ and no Domain (RFC 6265bis 4.1.3.2).
const HostPrefix = "__Host-"

// maxValue bounds what is read of a cookie value before its MAC is
// checked: every value this package signs is far shorter.
const maxValue = 512

// Jar names, sets and reads one service's cookies for the API's scheme.
// The zero Jar is plain http with no key: Open accepts nothing.
type Jar struct {
	// Secure is true when the API's public URL is https (TLS may end at
	// a proxy in front of the servers): cookies are __Host- prefixed.
	Secure bool
	// Key signs values; every control-plane server must use the same
	// one (derive it from the sealing key) so any of them reads a value
	// another set, before and after a restart.
	Key []byte
}

// Name is base as the browser keeps it for this scheme: __Host-base over
// https, base over http.
func (j Jar) Name(base string) string {
	if j.Secure {
		return HostPrefix + base
	}
	return base
}

// Set sets the cookie base to value for maxAge (negative: delete it).
// It is HttpOnly and SameSite=Lax (a link opened from a mail client or
// another site still carries it, a cross-site form does not). Over https
// it is __Host- prefixed, Secure and on Path=/; over http it is kept to
// path.
func (j Jar) Set(w http.ResponseWriter, base, value, path string, maxAge time.Duration) {
	c := &http.Cookie{Name: j.Name(base), Value: value, Path: path, HttpOnly: true, SameSite: http.SameSiteLaxMode,
		MaxAge: int(maxAge / time.Second)}
	if maxAge < 0 {
		c.MaxAge, c.Value = -1, ""
	}
	if j.Secure {
		c.Secure, c.Path = true, "/"
	}
	http.SetCookie(w, c)
}

// Values are the values the request carries under base's name for this
// scheme, in the order sent (a browser sends every cookie of one name
// whose domain and path match: a planted one can come first). The other
// scheme's name is never read.
func (j Jar) Values(r *http.Request, base string) []string {
	var out []string
	for _, c := range r.CookiesNamed(j.Name(base)) {
		if len(c.Value) <= maxValue {
			out = append(out, c.Value)
		}
	}
	return out
}

// Sign returns value followed by "." and its MAC for purpose: the form
// Open and Signed read. value must not be empty.
func (j Jar) Sign(purpose, value string) string {
	return value + "." + j.mac(purpose, value)
}

// Open returns the value of signed when its MAC for purpose matches,
// and false for anything else (unsigned, signed for another value or
// purpose, or with another key).
func (j Jar) Open(purpose, signed string) (string, bool) {
	i := strings.LastIndexByte(signed, '.')
	if i <= 0 || len(j.Key) == 0 {
		return "", false
	}
	v, sig := signed[:i], signed[i+1:]
	if !hmac.Equal([]byte(sig), []byte(j.mac(purpose, v))) {
		return "", false
	}
	return v, true
}

// Signed returns the value of the first cookie under base that Open
// accepts for purpose: a planted or forged cookie beside it is skipped.
func (j Jar) Signed(r *http.Request, base, purpose string) (string, bool) {
	for _, raw := range j.Values(r, base) {
		if v, ok := j.Open(purpose, raw); ok {
			return v, true
		}
	}
	return "", false
}

func (j Jar) mac(purpose, value string) string {
	m := hmac.New(sha256.New, j.Key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
