package toolbox

import (
	"encoding/base64"
	"io"
	"strings"
)

// newBase64 decodes a MIME base64 body, whose lines are wrapped.
func newBase64(r io.Reader) io.Reader {
	b, err := io.ReadAll(io.LimitReader(r, 8<<20))
	if err != nil {
		return strings.NewReader("")
	}
	clean := strings.Map(func(c rune) rune {
		if c == '\r' || c == '\n' || c == ' ' || c == '\t' {
			return -1
		}
		return c
	}, string(b))
	out, err := base64.StdEncoding.DecodeString(clean)
	if err != nil {
		return strings.NewReader("")
	}
	return strings.NewReader(string(out))
}
