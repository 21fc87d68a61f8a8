package logincode

import (
	"regexp"
	"testing"
)

// TestOf: the code has its shape, is stable for one challenge and
// differs between challenges.
func TestOf(t *testing.T) {
	shape := regexp.MustCompile(`^[A-Z2-7]{4}-[A-Z2-7]{4}$`)
	a, b := "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
	again := Of(string([]byte(a)))
	if !shape.MatchString(Of(a)) || Of(a) != again || Of(a) == Of(b) {
		t.Fatalf("codes: %s %s", Of(a), Of(b))
	}
}
