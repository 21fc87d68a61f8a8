package oauth

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// mailbox keeps the sign-in links mailed.
type mailbox struct {
	mu    sync.Mutex
	links []string
}

var linkRE = regexp.MustCompile(`/connect/signin\?t=(\S+)`)

func (m *mailbox) Send(_ context.Context, mail state.Mail) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := linkRE.FindStringSubmatch(mail.Text); g != nil {
		tok, _ := url.QueryUnescape(g[1])
		m.links = append(m.links, tok)
	}
	return nil
}

// TestSigninsBounded: a flood of sign-in requests, from a new address
// each time for many real accounts (every per-address and per-account
// limit passed), keeps at most maxSignins links in memory; a link lives
// signinLife and no longer, and is gone from memory once expired.
func TestSigninsBounded(t *testing.T) {
	var offset atomic.Int64
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return t0.Add(time.Duration(offset.Load())) }
	store := state.NewStore()
	accounts := maxSignins/3 + 100 // three links an hour each: the flood is past the bound
	err := store.Update(func(tx *state.Tx) error {
		for i := range accounts + 1 {
			id := fmt.Sprintf("usr_%04d", i)
			if err := tx.CreateAccount(state.Account{ID: id, Email: id + "@example.com", Plan: state.PlanFree, CreatedAt: t0},
				state.Workspace{ID: fmt.Sprintf("ws_%04d", i), Name: id, CreatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mail := &mailbox{}
	s := New(Config{Store: store, Mailer: mail, PublicURL: "https://api.example.com", Key: []byte("k"), Now: now})
	req := &request{raw: "client_id=c", client: &state.OAuthClient{Name: "Flood"}}
	const browser = "the asking browser's sign-in cookie"
	n := 0
	for round := range 3 {
		for i := range accounts {
			n++
			ip := fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
			s.mailSignin(context.Background(), ip, fmt.Sprintf("usr_%04d@example.com", i), req, browser)
			if c := s.signins.count(); c > maxSignins {
				t.Fatalf("round %d, request %d: %d links kept, bound %d", round, n, c, maxSignins)
			}
		}
	}
	if len(mail.links) != n || s.signins.count() != maxSignins {
		t.Fatalf("%d requests, %d mailed, %d kept", n, len(mail.links), s.signins.count())
	}
	// The newest link works, in the browser that asked for it only.
	newest := secret.Hash(mail.links[len(mail.links)-1])
	if _, res := s.signins.take(newest, "another browser"); res != signinOtherBrowser {
		t.Fatalf("newest link in another browser: %v", res)
	}
	if p, res := s.signins.take(newest, browser); res != signinOK || p.userID == "" {
		t.Fatalf("newest link: %v", res)
	}
	if _, res := s.signins.take(newest, browser); res != signinUnknown {
		t.Fatalf("newest link twice: %v", res)
	}

	// Past signinLife every link is refused, and the next request
	// leaves only itself in memory.
	offset.Store(int64(signinLife))
	if _, res := s.signins.take(secret.Hash(mail.links[len(mail.links)-2]), browser); res != signinUnknown {
		t.Fatalf("expired link: %v", res)
	}
	s.mailSignin(context.Background(), "192.0.2.1", fmt.Sprintf("usr_%04d@example.com", accounts), req, browser)
	if c := s.signins.count(); c != 1 {
		t.Fatalf("%d links kept after they expired", c)
	}
}

// TestLimitKey: an IPv6 client is limited by its /64, which one host
// holds whole; IPv4 (also when mapped) by its address.
func TestLimitKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":              "192.0.2.7",
		"::ffff:192.0.2.7":       "192.0.2.7",
		"2001:db8:1:2:3:4:5:6":   "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1":   "2001:db8:1:2::/64",
		"not an address at all!": "not an address at all!",
	} {
		if got := limitKey(in); got != want {
			t.Errorf("limitKey(%q) = %q, want %q", in, got, want)
		}
	}
}
