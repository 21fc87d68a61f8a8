package templates

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/sites"
)

// TestCappedWriter: a dump stops, with sites.ErrInvalid, at its bound.
func TestCappedWriter(t *testing.T) {
	var b strings.Builder
	c := &capped{w: &b, left: 5}
	if n, err := c.Write([]byte("abc")); n != 3 || err != nil {
		t.Fatal(n, err)
	}
	if _, err := c.Write([]byte("def")); !errors.Is(err, sites.ErrInvalid) || b.String() != "abc" {
		t.Fatalf("past the bound: %v, wrote %q", err, b.String())
	}
}
