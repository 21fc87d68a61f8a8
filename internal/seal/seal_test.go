package seal

import (
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	s, err := New("cluster-secret", "license")
	if err != nil {
		t.Fatal(err)
	}
	box := s.Seal("KEY-123456789", "lib_1")
	if strings.Contains(string(box), "KEY-123456789") {
		t.Fatal("plaintext visible in sealed value")
	}
	if got, err := s.Open(box, "lib_1"); err != nil || got != "KEY-123456789" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := s.Open(box, "lib_2"); err == nil {
		t.Fatal("opened under another record's aad")
	}
	other, _ := New("another-secret", "license")
	if _, err := other.Open(box, "lib_1"); err == nil {
		t.Fatal("opened with another cluster's key")
	}
}

func TestHint(t *testing.T) {
	tests := []struct{ key, want string }{
		{"", ""},
		{"short", "•••••"},
		{"elevenchars", "•••••••••••"},
		{"twelve-chars", "••••••••hars"},
		{"LIC-0000-1111-2222", "••••••••••••••2222"},
	}
	for _, tt := range tests {
		if got := Hint(tt.key); got != tt.want {
			t.Errorf("Hint(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}
