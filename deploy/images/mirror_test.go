package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMirror(t *testing.T) {
	cases := []struct {
		name, file, content, want string
	}{
		{"deb822", "sources.list.d/debian.sources", "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n", "http://mirror.example/debian"},
		{"deb822 security first", "sources.list.d/debian.sources", "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n\nTypes: deb-src deb\nURIs: http://m.example/debian/\nSuites: bookworm\n", "http://m.example/debian"},
		{"deb822 disabled", "sources.list.d/a.sources", "Types: deb\nEnabled: no\nURIs: http://off.example/debian\nSuites: bookworm\n", ""},
		{"one line with options", "sources.list", "# x\ndeb-src http://src.example/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://l.example/debian bookworm main\n", "http://l.example/debian"},
		{"one line security only", "sources.list", "deb http://s.example/debian-security bookworm-security main\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, "etc/apt", tc.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Mirror(root)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q %v, want %q", got, err, tc.want)
			}
		})
	}
}

func TestRecipeHashesDiffer(t *testing.T) {
	seen := map[string]string{}
	for _, r := range Recipes {
		h := r.Hash()
		if other, dup := seen[h]; dup {
			t.Fatalf("%s and %s share hash %s", r.Name, other, h)
		}
		seen[h] = r.Name
		if r.Hash() != h {
			t.Fatal("hash is not stable")
		}
	}
}
