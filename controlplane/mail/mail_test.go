package mail

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

func TestFormatKeepsHeadersOnOneLine(t *testing.T) {
	m := state.Mail{ID: "mail_1", To: "a@x.io\r\nBcc: evil@x.io", Subject: "Hi\nBcc: evil@x.io",
		Text: "line 1\nline 2", CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	out := string(format("sandboxd@x.io", m))
	head, body, ok := strings.Cut(out, "\r\n\r\n")
	if !ok {
		t.Fatal("no header/body separator")
	}
	for _, line := range strings.Split(head, "\r\n") {
		if strings.HasPrefix(line, "Bcc:") {
			t.Fatalf("header injected: %q", head)
		}
	}
	if body != "line 1\r\nline 2" {
		t.Fatalf("body %q", body)
	}
	if !strings.Contains(head, "Message-ID: <mail_1@sandboxd>") {
		t.Fatal(head)
	}
}
