package launcher

import (
	"strings"
	"testing"
)

// TestThemeValues: only hex colours reach the stylesheet, and an image URL
// cannot close its string or url() whatever it holds.
func TestThemeValues(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{{"#fff", true}, {"#1e40af", true}, {"#1e40afcc", true}, {"#12", false}, {"red", false}, {"#ggg", false},
		{"#fff;}body{x", false}, {"", false}} {
		if hexColour(c.in) != c.ok {
			t.Errorf("hexColour(%q) = %v", c.in, !c.ok)
		}
	}
	for _, in := range []string{`https://cdn.example.com/a.png?x=");}body{color:red}`, `https://x/'a'(b)\c<d>e f;g{h}`,
		"https://x/\u00e9\u2028"} {
		out := cssURL(in)
		if strings.ContainsAny(out, "\"'()\\<>; {}\u2028") || !strings.HasPrefix(out, "https://") {
			t.Errorf("cssURL(%q) = %q", in, out)
		}
	}
	if cssURL("javascript:alert(1)") != "" || cssURL("http://x/a.png") != "" {
		t.Error("a non-https URL reached the stylesheet")
	}
}
