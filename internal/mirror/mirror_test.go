package mirror

import (
	"errors"
	"testing"
)

func TestMap(t *testing.T) {
	m, err := Parse("downloads.wordpress.org=http://127.0.0.1:9000/wporg/, raw.githubusercontent.com/WordPress/blueprints=http://127.0.0.1:9000/bp,"+
		"raw.githubusercontent.com=http://127.0.0.1:9000/gh", false)
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"https://downloads.wordpress.org/plugin/woocommerce.zip":                 "http://127.0.0.1:9000/wporg/plugin/woocommerce.zip",
		"https://downloads.wordpress.org/theme/x.1.2.zip?nostats=1":              "http://127.0.0.1:9000/wporg/theme/x.1.2.zip?nostats=1",
		"https://raw.githubusercontent.com/WordPress/blueprints/trunk/a/b.xml":   "http://127.0.0.1:9000/bp/trunk/a/b.xml",
		"https://raw.githubusercontent.com/other/repo/main/x%20y.php":            "http://127.0.0.1:9000/gh/other/repo/main/x%20y.php",
		"https://RAW.githubusercontent.com/WordPress/blueprintsX/trunk/file.txt": "http://127.0.0.1:9000/gh/WordPress/blueprintsX/trunk/file.txt",
	} {
		got, ok := m.Map(in)
		if !ok || got != want {
			t.Errorf("Map(%s) = %s %v, want %s", in, got, ok, want)
		}
	}
	if _, _, err := m.Resolve("https://example.com/a.zip"); !errors.Is(err, ErrNotMirrored) {
		t.Errorf("unmapped without direct: %v", err)
	}
	for _, climb := range []string{"https://downloads.wordpress.org/../admin/x.json", "https://downloads.wordpress.org/plugin/%2e%2e/%2E%2E/x",
		"https://downloads.wordpress.org/./x"} {
		if _, _, err := m.Resolve(climb); !errors.Is(err, ErrDotSegment) {
			t.Errorf("%s: %v", climb, err)
		}
	}
	direct, _ := Parse("", true)
	if got, mapped, err := direct.Resolve("https://example.com/a.zip"); err != nil || mapped || got != "https://example.com/a.zip" {
		t.Errorf("direct: %s %v", got, err)
	}
	var none *Mirror
	if got, _, err := none.Resolve("https://example.com/a"); err != nil || got != "https://example.com/a" {
		t.Errorf("nil mirror: %s %v", got, err)
	}
	if got := m.Targets(); len(got) != 3 || got[0] != "127.0.0.1" {
		t.Errorf("targets %v", got)
	}
	for _, bad := range []string{"nohost", "=http://x", "a.org=ftp://x", "a.org=http://u:p@x", "a b=http://x", "a.org=http://x/?q=1"} {
		if _, err := Parse(bad, true); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
