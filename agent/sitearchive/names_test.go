package sitearchive

import (
	"errors"
	"hash/maphash"
	"strings"
	"testing"
)

// TestSplitName: names are cleaned, and any that could land outside the
// archive's directory is refused.
func TestSplitName(t *testing.T) {
	for _, c := range []struct {
		name string
		zip  bool
		want string // components joined by "|"; "!" + a message part if refused
	}{
		{"wp-content/a.php", false, "wp-content|a.php"},
		{"./wp-content/./a//b/", false, "wp-content|a|b"},
		{"././x", false, "x"},
		{"./", false, ""},
		{".", false, ""},
		{`a\b`, false, `a\b`},
		{`a\b`, true, "a|b"},
		{"..", false, "!leaves"},
		{"a/..", false, "!leaves"},
		{"...", false, "..."},
		{"..a/b..", false, "..a|b.."},
		{`a\..\b`, true, "!leaves"},
		{`a\..\b`, false, `a\..\b`}, // one odd name on Linux, not a climb
		{"/x", false, "!absolute"},
		{"//x", false, "!absolute"},
		{"C:/x", false, "!absolute"},
		{"c:x", false, "!absolute"},
		{`\\host\share`, true, "!absolute"},
		{`\x`, true, "!absolute"},
		{"1:/x", false, "1:|x"},
		{"a\x00b", false, "!NUL"},
		{strings.Repeat("a", 255), false, strings.Repeat("a", 255)},
		{strings.Repeat("a", 256), false, "!255"},
		{strings.Repeat("a/", 64), false, strings.TrimSuffix(strings.Repeat("a|", 64), "|")},
		{strings.Repeat("a/", 65), false, "!64 levels"},
		{strings.Repeat("/", 4097), false, "!4096"},
	} {
		comps, err := splitName(c.name, c.zip)
		got := strings.Join(comps, "|")
		if err != nil {
			if !errors.Is(err, ErrUnsafe) {
				t.Errorf("%.40q: %v is not ErrUnsafe", c.name, err)
			}
			got = "!" + err.Error()
		}
		if strings.HasPrefix(c.want, "!") && !strings.Contains(got, c.want[1:]) || !strings.HasPrefix(c.want, "!") && got != c.want {
			t.Errorf("splitName(%.40q, %v) = %.60q, want %.60q", c.name, c.zip, got, c.want)
		}
	}
}

// TestLinkTarget: a symlink's target is kept only if it stays inside
// wp-content however the kernel resolves it.
func TestLinkTarget(t *testing.T) {
	for _, c := range []struct {
		rel    string // the link, under wp-content
		target string
		zip    bool
		want   string // cleaned target, or "!" + a message part
	}{
		{"themes/x/link", "../y/style.css", false, "../y/style.css"},
		{"themes/x/link", "./../y//style.css", false, "../y/style.css"},
		{"themes/x/link", "../..", false, "../.."},
		{"themes/x/link", "../../..", false, "!outside"},
		{"l", "a/b", false, "a/b"},
		{"l", ".", false, "."},
		{"l", "..", false, "!outside"},
		{"a/l", "..", false, ".."},
		{"a/l", "../..", false, "!outside"},
		{"a/l", "b/../c", false, "!after a name"},
		{"a/l", "b/..", false, "!after a name"},
		{"a/b/l", `..\x`, false, `..\x`},
		{"a/b/l", `..\..\..\x`, true, "!outside"},
		{"a/b/l", `..\x`, true, "../x"},
		{"l", "/etc", false, "!absolute"},
		{"l", "C:/Windows", false, "!absolute"},
		{"l", "", false, "!empty"},
		{"l", "a\x00", false, "!NUL"},
		{"l", strings.Repeat("a/", 2049), false, "!4096"},
		{"l", strings.Repeat("b", 256), false, "!255"},
	} {
		got, err := linkTarget(strings.Split(c.rel, "/"), c.target, c.zip)
		if err != nil {
			if !errors.Is(err, ErrUnsafe) {
				t.Errorf("%q -> %.40q: %v is not ErrUnsafe", c.rel, c.target, err)
			}
			got = "!" + err.Error()
		}
		if strings.HasPrefix(c.want, "!") && !strings.Contains(got, c.want[1:]) || !strings.HasPrefix(c.want, "!") && got != c.want {
			t.Errorf("linkTarget(%q, %.40q) = %.60q, want %q", c.rel, c.target, got, c.want)
		}
	}
}

// TestWalkParentsKey: the incremental hash walkParents returns is the one
// hardlinkTarget looks up.
func TestLinkStaysInside(t *testing.T) {
	for _, c := range []struct {
		name, target string
		want         bool
	}{
		{"wp-content/themes/x/link", "../y/style.css", true},
		{"./wp-content/uploads/l", "../themes", true},
		{"wp-content/l", "uploads/a.jpg", true},
		{"wp-content/l", "..", false},
		{"wp-content/uploads/l", "../../wp-config.php", false},
		{"wp-content/l", "/", false},
		{"wp-content/l", "/etc/shadow", false},
		{"wp-content/a/l", "b/../../..", false},
		{"wp-content", "x", false},
		{"other/l", "x", false},
		{"../wp-content/l", "x", false},
		{"wp-content/l", "", false},
	} {
		if got := LinkStaysInside(c.name, c.target); got != c.want {
			t.Errorf("%s -> %s: %v, want %v", c.name, c.target, got, c.want)
		}
	}
}

func TestWalkParentsKey(t *testing.T) {
	w := newWalker(DefaultLimits, nil, false)
	for _, rel := range []string{"a", "a/b", "themes/x/style.css"} {
		key, err := w.walkParents(strings.Split(rel, "/"))
		if err != nil {
			t.Fatal(err)
		}
		if want := maphash.String(w.seed, rel); key != want {
			t.Errorf("%q: key %x, want %x", rel, key, want)
		}
	}
	if w.nodes[maphash.String(w.seed, "themes/x")] != nodeDir {
		t.Error("parent not recorded as a directory")
	}
}
