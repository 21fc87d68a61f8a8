// Package sitepath decodes the file manager's path parameters: base64url
// (RFC 4648 §5, unpadded) encodings of paths relative to a site's
// WordPress root. It is the one place that decides what a path may be, so
// the API and the agent refuse the same things.
package sitepath

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxLen bounds a decoded path; Linux refuses longer ones anyway.
const MaxLen = 4096

// ErrInvalid marks every refusal; the message says which rule.
var ErrInvalid = errors.New("invalid path")

// Decode turns one encoded parameter into a clean relative path ("" is the
// root). It refuses anything but the URL-safe alphabet (so padding, the
// standard alphabet's + and /, and CR/LF are refused rather than skipped
// as Go's decoder would), non-canonical encodings, and decoded paths that
// are absolute, contain NUL or a ".." segment.
func Decode(enc string) (string, error) {
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", fmt.Errorf("%w: %q is not in the unpadded base64url alphabet", ErrInvalid, c)
		}
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("%w: not unpadded base64url: %v", ErrInvalid, err)
	}
	return Clean(string(raw))
}

// Clean checks a decoded path and drops empty and "." segments.
func Clean(p string) (string, error) {
	switch {
	case len(p) > MaxLen:
		return "", fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxLen)
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("%w: contains a NUL byte", ErrInvalid)
	case !utf8.ValidString(p):
		return "", fmt.Errorf("%w: not UTF-8", ErrInvalid)
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`):
		return "", fmt.Errorf("%w: absolute; paths are relative to the WordPress root", ErrInvalid)
	case strings.ContainsAny(p, "\r\n"):
		return "", fmt.Errorf("%w: contains a line break", ErrInvalid)
	}
	var parts []string
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%w: a \"..\" segment leaves the WordPress root", ErrInvalid)
		}
		parts = append(parts, seg)
	}
	return strings.Join(parts, "/"), nil
}

// Encode is Decode's inverse, for clients and tests.
func Encode(p string) string { return base64.RawURLEncoding.EncodeToString([]byte(p)) }
