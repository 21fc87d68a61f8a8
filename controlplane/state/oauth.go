package state

import (
	"errors"
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Token kinds: a personal API token, or one an OAuth client was given.
const (
	TokenPersonal = "personal"
	TokenOAuth    = "oauth"
)

// ScopeAccount is the OAuth scope of a command-line login: the token it
// gives works as a personal API token does.
const ScopeAccount = "account"

// ScopeMCP is the OAuth scope of an AI agent's MCP client: its token
// works at the MCP endpoint alone, in the workspace chosen on the consent
// page, with the account's capabilities there.
const ScopeMCP = "mcp"

// OAuthClient is a public client (RFC 7591) registered for the connector
// flow: it has no secret, only exact redirect URIs.
type OAuthClient struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	RedirectURIs []string  `json:"redirectUris"`
	Scope        string    `json:"scope"`
	SoftwareID   string    `json:"softwareId,omitempty"`
	ClientURI    string    `json:"clientUri,omitempty"`
	CreatedAt    time.Time `json:"createdAt"`
	// LastTokenAt is when a code of the client last became a token; nil
	// means it never got one (collected UnusedAfter its creation).
	LastTokenAt *time.Time `json:"lastTokenAt,omitempty"`
	// IdleSince is when a collection pass first found none of the
	// client's tokens alive (revoked, or expired); nil while one lives.
	// The client is collected IdleAfter that.
	IdleSince *time.Time `json:"idleSince,omitempty"`
}

// OAuthCode is an authorization code, kept by its hash: single use,
// bound to its client, redirect URI, PKCE challenge and the account that
// approved it.
type OAuthCode struct {
	ID          string `json:"id"` // SHA-256 of the code
	ClientID    string `json:"clientId"`
	UserID      string `json:"userId"`
	RedirectURI string `json:"redirectUri"`
	Challenge   string `json:"challenge"`
	Scope       string `json:"scope"`
	// WorkspaceID is the workspace the account holder chose on the
	// consent page: the only one the code's token reaches (empty for
	// the account scope, whose token is personal).
	WorkspaceID string `json:"workspaceId,omitempty"`
	// Resource is the protected resource the code's token is for (RFC
	// 8707), as the authorization request named it.
	Resource      string    `json:"resource,omitempty"`
	ExpiresAt     time.Time `json:"expiresAt"`
	Used          bool      `json:"used,omitempty"`
	IssuedTokenID string    `json:"issuedTokenId,omitempty"`
}

// codeKeep is how long a used or expired code is remembered, so a replay
// within it still revokes what the code gave.
const codeKeep = 10 * time.Minute

// OAuthClient returns a registered client, or nil.
func (s *Store) OAuthClient(id string) (*OAuthClient, error) {
	return first[OAuthClient](s.read(), tableOAuthClients, "id", id)
}

// OAuthCode returns a code by its hash, or nil.
func (s *Store) OAuthCode(hash string) (*OAuthCode, error) {
	return first[OAuthCode](s.read(), tableOAuthCodes, "id", hash)
}

// ErrTooManyClients refuses a registration when the cluster holds its
// most registered clients.
var ErrTooManyClients = errors.New("too many registered OAuth clients")

// OAuthClientCount is how many clients are registered.
func (s *Store) OAuthClientCount() (int, error) {
	return countRows(s.read(), tableOAuthClients)
}

func countRows(tx *memdb.Txn, table string) (int, error) {
	it, err := tx.Get(table, "id")
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", table, err)
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	return n, nil
}

// RegisterOAuthClient adds a client. When max (above zero) clients are
// registered already, the oldest client that never got a token and was
// registered before c.CreatedAt-EvictUnusedAfter makes room (a flood of
// registrations cannot lock real connectors out until the collection);
// with none such, ErrTooManyClients.
func (t *Tx) RegisterOAuthClient(c OAuthClient, max int) error {
	return t.run(func(tx *memdb.Txn) error {
		if dup, err := first[OAuthClient](tx, tableOAuthClients, "id", c.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: client id %s exists", ErrConflict, c.ID)
		}
		if max > 0 {
			n, err := countRows(tx, tableOAuthClients)
			if err != nil {
				return err
			}
			if n >= max {
				victim, err := oldestUnusedClient(tx, c.CreatedAt.Add(-EvictUnusedAfter))
				if err != nil {
					return err
				}
				if victim == nil {
					return fmt.Errorf("%w: %d of %d", ErrTooManyClients, n, max)
				}
				if err := remove(tx, tableOAuthClients, victim); err != nil {
					return err
				}
			}
		}
		return insert(tx, tableOAuthClients, &c)
	})
}

// EvictUnusedAfter is how old a client that never got a token must be
// before a registration past the cap may evict it: long enough for a
// person to go through the consent page.
const EvictUnusedAfter = time.Hour

// oldestUnusedClient is the earliest registered client, before before,
// that never got a token and has no code waiting, or nil (ties by id, so
// every server picks the same one).
func oldestUnusedClient(tx *memdb.Txn, before time.Time) (*OAuthClient, error) {
	clients, err := all[OAuthClient](tx, tableOAuthClients, "id")
	if err != nil {
		return nil, err
	}
	codes, err := all[OAuthCode](tx, tableOAuthCodes, "id")
	if err != nil {
		return nil, err
	}
	waiting := map[string]bool{}
	for _, c := range codes {
		waiting[c.ClientID] = true
	}
	var best *OAuthClient
	for _, c := range clients {
		if c.LastTokenAt != nil || waiting[c.ID] || !c.CreatedAt.Before(before) {
			continue
		}
		if best == nil || c.CreatedAt.Before(best.CreatedAt) || (c.CreatedAt.Equal(best.CreatedAt) && c.ID < best.ID) {
			best = c
		}
	}
	return best, nil
}

// CreateOAuthCode stores a code approved at at, and forgets codes past
// their keeping time.
func (t *Tx) CreateOAuthCode(c OAuthCode, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		if cl, err := first[OAuthClient](tx, tableOAuthClients, "id", c.ClientID); err != nil {
			return err
		} else if cl == nil {
			return fmt.Errorf("%w: client %s", ErrNotFound, c.ClientID)
		}
		if acct, err := first[Account](tx, tableAccounts, "id", c.UserID); err != nil {
			return err
		} else if acct == nil {
			return fmt.Errorf("%w: account %s", ErrNotFound, c.UserID)
		}
		if c.WorkspaceID != "" {
			if m, err := first[Member](tx, tableMembers, "id", c.WorkspaceID, c.UserID); err != nil {
				return err
			} else if m == nil {
				return fmt.Errorf("%w: workspace %s", ErrNotFound, c.WorkspaceID)
			}
		}
		if dup, err := first[OAuthCode](tx, tableOAuthCodes, "id", c.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: code exists", ErrConflict)
		}
		it, err := tx.Get(tableOAuthCodes, "id")
		if err != nil {
			return err
		}
		var stale []*OAuthCode
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if old := raw.(*OAuthCode); at.After(old.ExpiresAt.Add(codeKeep)) {
				stale = append(stale, old)
			}
		}
		for _, old := range stale {
			if err := remove(tx, tableOAuthCodes, old); err != nil {
				return err
			}
		}
		return insert(tx, tableOAuthCodes, &c)
	})
}

// Redemption is what redeeming a code did.
type Redemption struct {
	// Reused: the code had been redeemed; the token it gave is revoked
	// and no new one is issued.
	Reused bool
}

// RedeemOAuthCode exchanges a code (by hash) for tok, once. A second
// redemption revokes the token the first one issued (RFC 6749 4.1.2); an
// expired or unknown code is ErrNotFound. The caller has checked the
// client, redirect URI and verifier against the code as read.
func (t *Tx) RedeemOAuthCode(hash string, tok Token, at time.Time) (*Redemption, error) {
	var out *Redemption
	err := t.run(func(tx *memdb.Txn) error {
		c, err := first[OAuthCode](tx, tableOAuthCodes, "id", hash)
		if err != nil {
			return err
		}
		if c == nil || (!c.Used && !at.Before(c.ExpiresAt)) {
			return fmt.Errorf("%w: code", ErrNotFound)
		}
		if c.Used {
			if issued, err := first[Token](tx, tableTokens, "id", c.IssuedTokenID); err != nil {
				return err
			} else if issued != nil {
				if err := remove(tx, tableTokens, issued); err != nil {
					return err
				}
			}
			out = &Redemption{Reused: true}
			return nil
		}
		if tok.UserID != c.UserID || tok.ClientID != c.ClientID || tok.Kind != TokenOAuth || tok.WorkspaceID != c.WorkspaceID {
			return fmt.Errorf("%w: a code's token is its account's, client's and workspace's", ErrInvalid)
		}
		if dup, err := first[Token](tx, tableTokens, "id", tok.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: token id %s exists", ErrConflict, tok.ID)
		}
		used := *c
		used.Used, used.IssuedTokenID = true, tok.ID
		if err := insert(tx, tableOAuthCodes, &used); err != nil {
			return err
		}
		if cl, err := first[OAuthClient](tx, tableOAuthClients, "id", c.ClientID); err != nil {
			return err
		} else if cl != nil {
			got := *cl
			got.LastTokenAt, got.IdleSince = &at, nil
			if err := insert(tx, tableOAuthClients, &got); err != nil {
				return err
			}
		}
		out = &Redemption{}
		if err := insert(tx, tableTokens, &tok); err != nil {
			return err
		}
		return trimOAuthTokens(tx, tok.UserID, at)
	})
	return out, err
}

// MaxOAuthTokens bounds the connector tokens an account holds: past it,
// a new token retires the account's oldest one, so consenting again and
// again cannot grow the state.
const MaxOAuthTokens = 100

// trimOAuthTokens removes the account's oldest live connector tokens (by
// creation, then id: the same on every server) past MaxOAuthTokens;
// expired ones are the prune's.
func trimOAuthTokens(tx *memdb.Txn, userID string, at time.Time) error {
	toks, err := all[Token](tx, tableTokens, "user", userID)
	if err != nil {
		return err
	}
	var live []*Token
	for _, t := range toks {
		if t.Kind != TokenOAuth {
			continue
		}
		if t.ExpiresAt != nil && !at.Before(*t.ExpiresAt) {
			continue // expired: the prune removes it in time
		}
		live = append(live, t)
	}
	if len(live) <= MaxOAuthTokens {
		return nil
	}
	sort.Slice(live, func(i, j int) bool {
		if !live[i].CreatedAt.Equal(live[j].CreatedAt) {
			return live[i].CreatedAt.Before(live[j].CreatedAt)
		}
		return live[i].ID < live[j].ID
	})
	for _, t := range live[:len(live)-MaxOAuthTokens] {
		if err := remove(tx, tableTokens, t); err != nil {
			return err
		}
	}
	return nil
}
