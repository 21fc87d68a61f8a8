package naming

import (
	"strings"
	"testing"
)

func TestNameAndDescription(t *testing.T) {
	for in, ok := range map[string]bool{"Shop demo": true, "  padded  ": true, "": false, "   ": false,
		strings.Repeat("x", 101): false, "two\nlines": false, "nul\x00": false} {
		if _, err := Name(in); (err == nil) != ok {
			t.Errorf("Name(%q): %v", in, err)
		}
	}
	if n, _ := Name("  padded  "); n != "padded" {
		t.Errorf("not trimmed: %q", n)
	}
	if _, err := Description(strings.Repeat("d", 2001)); err == nil {
		t.Error("a long description passed")
	}
	if _, err := Description(""); err != nil {
		t.Error(err)
	}
}

func TestSlug(t *testing.T) {
	taken := map[string]bool{"shop-demo": true, "shop-demo-2": true}
	for _, c := range []struct{ name, want string }{
		{"Shop Demo", "shop-demo-3"}, {"Fresh!", "fresh"}, {"???", "thing"}, {strings.Repeat("ab-", 30), strings.Trim(strings.Repeat("ab-", 16), "-")},
	} {
		if got := Slug(c.name, "thing", taken, false); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if got := Slug("Shop Demo", "thing", taken, true); !strings.HasPrefix(got, "shop-demo-") || len(got) != len("shop-demo-")+5 {
		t.Errorf("random slug %q", got)
	}
}
