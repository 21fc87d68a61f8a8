// Package mail delivers the control plane's email (workspace invitations):
// through an SMTP server when one is configured, otherwise into the
// replicated outbox that `sandboxd admin outbox` reads.
package mail

import (
	"context"
	"fmt"
	"net"
	"net/smtp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// SMTPConfig says where to send mail. Addr empty means no SMTP.
type SMTPConfig struct {
	// Addr is host:port of the SMTP server.
	Addr string
	// From is the envelope and header sender.
	From string
	// Username and Password enable PLAIN auth (only over TLS or to localhost,
	// as net/smtp enforces).
	Username string
	Password string
}

// SMTP sends mail through an SMTP server.
type SMTP struct{ cfg SMTPConfig }

// NewSMTP returns a sender for cfg.
func NewSMTP(cfg SMTPConfig) *SMTP {
	if cfg.From == "" {
		cfg.From = "sandboxd@localhost"
	}
	return &SMTP{cfg: cfg}
}

// Send delivers one plain-text message.
func (s *SMTP) Send(ctx context.Context, m state.Mail) error {
	var auth smtp.Auth
	if s.cfg.Username != "" {
		host, _, _ := net.SplitHostPort(s.cfg.Addr)
		auth = smtp.PlainAuth("", s.cfg.Username, s.cfg.Password, host)
	}
	done := make(chan error, 1)
	go func() { done <- smtp.SendMail(s.cfg.Addr, auth, s.cfg.From, []string{m.To}, format(s.cfg.From, m)) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("smtp send to %s: %w", s.cfg.Addr, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("smtp send: %w", ctx.Err())
	}
}

func headerSafe(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

func format(from string, m state.Mail) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\n", headerSafe(from))
	fmt.Fprintf(&b, "To: %s\r\n", headerSafe(m.To))
	fmt.Fprintf(&b, "Subject: %s\r\n", headerSafe(m.Subject))
	fmt.Fprintf(&b, "Date: %s\r\n", m.CreatedAt.Format(time.RFC1123Z))
	fmt.Fprintf(&b, "Message-ID: <%s@sandboxd>\r\n", m.ID)
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n")
	b.WriteString(strings.ReplaceAll(strings.ReplaceAll(m.Text, "\r\n", "\n"), "\n", "\r\n"))
	return []byte(b.String())
}

// Outbox keeps mail in the replicated store instead of sending it.
type Outbox struct{ raft fsm.Applier }

// NewOutbox returns an outbox writing through raft.
func NewOutbox(raft fsm.Applier) *Outbox { return &Outbox{raft: raft} }

// Send stores the message.
func (o *Outbox) Send(ctx context.Context, m state.Mail) error {
	if _, err := o.raft.Apply(ctx, fsm.AppendMail{Mail: m}); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	return nil
}
