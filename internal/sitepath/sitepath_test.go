package sitepath

import (
	"encoding/base64"
	"errors"
	"testing"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name, enc, want string
		bad             bool
	}{
		{name: "plain", enc: Encode("wp-content/uploads/a.txt"), want: "wp-content/uploads/a.txt"},
		{name: "root", enc: "", want: ""},
		{name: "dot segments dropped", enc: Encode("./wp-content//a/."), want: "wp-content/a"},
		{name: "url alphabet", enc: Encode("a?>b"), want: "a?>b"},
		{name: "dotdot", enc: Encode("../wp-config.php"), bad: true},
		{name: "inner dotdot", enc: Encode("wp-content/../../etc"), bad: true},
		{name: "absolute", enc: Encode("/etc/passwd"), bad: true},
		{name: "backslash absolute", enc: Encode(`\etc`), bad: true},
		{name: "nul", enc: Encode("a\x00b"), bad: true},
		{name: "newline in path", enc: Encode("a\nb"), bad: true},
		{name: "padded", enc: base64.URLEncoding.EncodeToString([]byte("ab")), bad: true},
		{name: "standard alphabet", enc: base64.RawStdEncoding.EncodeToString([]byte("a?>b")), bad: true},
		{name: "crlf inside encoding", enc: Encode("wp-content")[:4] + "\r\n" + Encode("wp-content")[4:], bad: true},
		{name: "space", enc: "YWJj ZA", bad: true},
		{name: "non canonical", enc: "YR", bad: true},
		{name: "not utf8", enc: Encode("\xff\xfe"), bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.enc)
			if tt.bad {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Decode(%q) = %q, %v; want ErrInvalid", tt.enc, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Decode(%q) = %q, %v; want %q", tt.enc, got, err, tt.want)
			}
		})
	}
}
