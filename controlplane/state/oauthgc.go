package state

import (
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// PruneOAuthClients collects registered clients nobody uses, as seen at
// at (the leader's clock, stamped into the command):
//
//   - a client that never got a token, unusedAfter after it registered;
//   - a client that got tokens but has none alive (all revoked, or
//     expired), idleAfter after a pass first found it so (IdleSince).
//
// A client with a live token or a code not yet exchanged (an approval
// in flight) is kept, and its IdleSince cleared. A collected client's
// codes and expired tokens go with it (a used code's replay has nothing
// left to revoke). A zero duration collects nothing by that rule. It returns how
// many clients it removed.
func (t *Tx) PruneOAuthClients(at time.Time, unusedAfter, idleAfter time.Duration) (int, error) {
	removed := 0
	err := t.run(func(tx *memdb.Txn) error {
		tokens, err := all[Token](tx, tableTokens, "id")
		if err != nil {
			return err
		}
		live := map[string]bool{}
		expired := map[string][]*Token{}
		for _, tok := range tokens {
			switch {
			case tok.ClientID == "":
			case tok.ExpiresAt == nil || at.Before(*tok.ExpiresAt):
				live[tok.ClientID] = true
			default:
				expired[tok.ClientID] = append(expired[tok.ClientID], tok)
			}
		}
		codes, err := all[OAuthCode](tx, tableOAuthCodes, "id")
		if err != nil {
			return err
		}
		inPlay := map[string]bool{}
		codesOf := map[string][]*OAuthCode{}
		for _, c := range codes {
			codesOf[c.ClientID] = append(codesOf[c.ClientID], c)
			if !c.Used && at.Before(c.ExpiresAt) {
				inPlay[c.ClientID] = true
			}
		}
		clients, err := all[OAuthClient](tx, tableOAuthClients, "id")
		if err != nil {
			return err
		}
		for _, c := range clients {
			var collect bool
			switch {
			case live[c.ID] || inPlay[c.ID]:
				if c.IdleSince != nil {
					busy := *c
					busy.IdleSince = nil
					if err := insert(tx, tableOAuthClients, &busy); err != nil {
						return err
					}
				}
				continue
			case c.LastTokenAt == nil:
				collect = unusedAfter > 0 && !at.Before(c.CreatedAt.Add(unusedAfter))
			case c.IdleSince == nil:
				idle, since := *c, at
				idle.IdleSince = &since
				if err := insert(tx, tableOAuthClients, &idle); err != nil {
					return err
				}
				continue
			default:
				collect = idleAfter > 0 && !at.Before(c.IdleSince.Add(idleAfter))
			}
			if !collect {
				continue
			}
			for _, tok := range expired[c.ID] {
				if err := remove(tx, tableTokens, tok); err != nil {
					return err
				}
			}
			for _, code := range codesOf[c.ID] {
				if err := remove(tx, tableOAuthCodes, code); err != nil {
					return err
				}
			}
			if err := remove(tx, tableOAuthClients, c); err != nil {
				return err
			}
			removed++
		}
		return nil
	})
	return removed, err
}
