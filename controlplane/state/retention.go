package state

import (
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Retention is how long PruneState keeps rows nothing needs any more.
// It travels in the prune's Raft entry (the leader fills it from its
// configuration), so every server deletes the same rows whatever its own
// binary's defaults are. A zero duration or count keeps those rows.
type Retention struct {
	// Jobs: finished jobs, counted from when they finished.
	Jobs time.Duration `json:"jobs"`
	// Mail: outbox messages (kept when no SMTP server is configured),
	// counted from when they were written.
	Mail time.Duration `json:"mail"`
	// Invitations: pending invitations counted from their expiry,
	// accepted ones from their acceptance.
	Invitations time.Duration `json:"invitations"`
	// Tokens: expired API tokens (personal and OAuth), counted from their
	// expiry.
	Tokens time.Duration `json:"tokens"`
	// UnsavedRuns: finished runs of a source applied without saving,
	// counted from when they finished. Finished runs of a deleted
	// Blueprint go at once.
	UnsavedRuns time.Duration `json:"unsavedRuns"`
	// Imports: failed, cancelled and site_deleted imports, counted from
	// their last change.
	Imports time.Duration `json:"imports"`
	// LeadsPerTemplate is how many leads a template keeps, newest first;
	// the leads of a deleted template go at once.
	LeadsPerTemplate int `json:"leadsPerTemplate"`
}

// DefaultRetention is what the leader prunes with unless configured
// otherwise.
func DefaultRetention() Retention {
	const day = 24 * time.Hour
	return Retention{Jobs: 7 * day, Mail: 7 * day, Invitations: 30 * day, Tokens: 30 * day, UnsavedRuns: 7 * day,
		Imports: 30 * day, LeadsPerTemplate: 10_000}
}

// Pruned counts the rows one PruneState removed, by table.
type Pruned map[string]int

// Total is how many rows were removed in all.
func (p Pruned) Total() int {
	n := 0
	for _, c := range p {
		n += c
	}
	return n
}

// PruneState removes, as of at, the rows the retention r lets go (see
// Retention), and the rows whose keeping time is part of the state
// itself: expired authorization codes (after codeKeep) and certificate
// leases past their expiry. Unfinished work (queued or running jobs,
// pending or running runs, unfinished imports) is never removed.
func (t *Tx) PruneState(at time.Time, r Retention) (Pruned, error) {
	out := Pruned{}
	err := t.run(func(tx *memdb.Txn) error {
		for _, p := range []func(*memdb.Txn, time.Time, Retention, Pruned) error{
			pruneJobs, pruneMail, pruneInvitations, pruneTokens, pruneRuns, pruneImports, pruneLeads,
			pruneOAuthCodes, pruneCertLocks,
		} {
			if err := p(tx, at, r, out); err != nil {
				return err
			}
		}
		return nil
	})
	for table, n := range out {
		if n == 0 {
			delete(out, table)
		}
	}
	return out, err
}

// older reports whether since is more than keep before at; a zero keep
// keeps everything.
func older(since, at time.Time, keep time.Duration) bool {
	return keep > 0 && since.Add(keep).Before(at)
}

// dropAll removes rows from table and counts them.
func dropAll[T any](tx *memdb.Txn, table string, rows []*T, out Pruned) error {
	for _, row := range rows {
		if err := remove(tx, table, row); err != nil {
			return err
		}
		out[table]++
	}
	return nil
}

func pruneJobs(tx *memdb.Txn, at time.Time, r Retention, out Pruned) error {
	var drop []*Job
	for _, status := range []string{JobSucceeded, JobFailed} {
		jobs, err := all[Job](tx, tableJobs, "status", status)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			end := j.UpdatedAt
			if j.FinishedAt != nil {
				end = *j.FinishedAt
			}
			if older(end, at, r.Jobs) {
				drop = append(drop, j)
			}
		}
	}
	return dropAll(tx, tableJobs, drop, out)
}

func pruneMail(tx *memdb.Txn, at time.Time, r Retention, out Pruned) error {
	mails, err := all[Mail](tx, tableOutbox, "id")
	if err != nil {
		return err
	}
	var drop []*Mail
	for _, m := range mails {
		if older(m.CreatedAt, at, r.Mail) {
			drop = append(drop, m)
		}
	}
	return dropAll(tx, tableOutbox, drop, out)
}

func pruneInvitations(tx *memdb.Txn, at time.Time, r Retention, out Pruned) error {
	invs, err := all[Invitation](tx, tableInvitations, "id")
	if err != nil {
		return err
	}
	var drop []*Invitation
	for _, inv := range invs {
		since := inv.ExpiresAt
		if inv.Status == InvitationAccepted && inv.AcceptedAt != nil {
			since = *inv.AcceptedAt
		}
		if older(since, at, r.Invitations) {
			drop = append(drop, inv)
		}
	}
	return dropAll(tx, tableInvitations, drop, out)
}

func pruneTokens(tx *memdb.Txn, at time.Time, r Retention, out Pruned) error {
	toks, err := all[Token](tx, tableTokens, "id")
	if err != nil {
		return err
	}
	var drop []*Token
	for _, tok := range toks {
		if tok.ExpiresAt != nil && older(*tok.ExpiresAt, at, r.Tokens) {
			drop = append(drop, tok)
		}
	}
	return dropAll(tx, tableTokens, drop, out)
}

// pruneRuns removes the finished runs of Blueprints that are gone at
// once, those of unsaved sources after their retention, and trims every
// saved Blueprint's finished runs to KeptRuns.
func pruneRuns(tx *memdb.Txn, at time.Time, r Retention, out Pruned) error {
	runs, err := all[BlueprintRun](tx, tableRuns, "id")
	if err != nil {
		return err
	}
	exists := map[string]bool{}
	var drop []*BlueprintRun
	trim := map[string]bool{}
	for _, run := range runs {
		if done, err := runDone(tx, run); err != nil {
			return err
		} else if !done {
			continue
		}
		if run.BlueprintID == "" {
			end := run.CreatedAt
			if run.FinishedAt != nil {
				end = *run.FinishedAt
			}
			if older(end, at, r.UnsavedRuns) {
				drop = append(drop, run)
			}
			continue
		}
		live, seen := exists[run.BlueprintID]
		if !seen {
			b, err := first[Blueprint](tx, tableBlueprints, "id", run.BlueprintID)
			if err != nil {
				return err
			}
			live = b != nil
			exists[run.BlueprintID] = live
		}
		if !live {
			drop = append(drop, run)
		} else {
			trim[run.BlueprintID] = true
		}
	}
	if err := dropAll(tx, tableRuns, drop, out); err != nil {
		return err
	}
	ids := make([]string, 0, len(trim))
	for id := range trim {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		n, err := trimRuns(tx, id)
		if err != nil {
			return err
		}
		out[tableRuns] += n
	}
	return nil
}

// KeptRuns is how many finished runs a saved Blueprint keeps, newest
// first: a new run drops the oldest beyond it.
const KeptRuns = 50

// runDone reports whether a run may be collected: it has finished and so
// has its job (a bake's job still freezes and swaps the template after
// its run succeeded, and reads the run to do so).
func runDone(tx *memdb.Txn, r *BlueprintRun) (bool, error) {
	if !r.Terminal() {
		return false, nil
	}
	if r.JobID == "" {
		return true, nil
	}
	j, err := first[Job](tx, tableJobs, "id", r.JobID)
	if err != nil {
		return false, err
	}
	return j == nil || j.Terminal(), nil
}

// trimRuns keeps a Blueprint's KeptRuns newest finished runs and
// removes the rest; it returns how many it removed.
func trimRuns(tx *memdb.Txn, blueprintID string) (int, error) {
	runs, err := all[BlueprintRun](tx, tableRuns, "blueprint", blueprintID)
	if err != nil {
		return 0, err
	}
	var done []*BlueprintRun
	for _, r := range runs {
		if ok, err := runDone(tx, r); err != nil {
			return 0, err
		} else if ok {
			done = append(done, r)
		}
	}
	if len(done) <= KeptRuns {
		return 0, nil
	}
	sort.Slice(done, func(i, j int) bool {
		if !done[i].CreatedAt.Equal(done[j].CreatedAt) {
			return done[i].CreatedAt.After(done[j].CreatedAt)
		}
		return done[i].ID > done[j].ID
	})
	n := 0
	for _, r := range done[KeptRuns:] {
		if err := remove(tx, tableRuns, r); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func pruneImports(tx *memdb.Txn, at time.Time, r Retention, out Pruned) error {
	imps, err := all[Import](tx, tableImports, "id")
	if err != nil {
		return err
	}
	var drop []*Import
	for _, imp := range imps {
		switch imp.Status {
		case ImportFailed, ImportCancelled, ImportSiteDeleted:
			if older(imp.UpdatedAt, at, r.Imports) {
				drop = append(drop, imp)
			}
		}
	}
	return dropAll(tx, tableImports, drop, out)
}

// pruneLeads removes the leads of deleted templates and trims every
// template's leads to the newest LeadsPerTemplate.
func pruneLeads(tx *memdb.Txn, _ time.Time, r Retention, out Pruned) error {
	leads, err := all[Lead](tx, tableLeads, "id")
	if err != nil {
		return err
	}
	byTemplate := map[string][]*Lead{}
	for _, l := range leads {
		byTemplate[l.TemplateID] = append(byTemplate[l.TemplateID], l)
	}
	ids := make([]string, 0, len(byTemplate))
	for id := range byTemplate {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var drop []*Lead
	for _, id := range ids {
		list := byTemplate[id]
		tpl, err := first[Template](tx, tableTemplates, "id", id)
		if err != nil {
			return err
		}
		if tpl == nil {
			drop = append(drop, list...)
			continue
		}
		if r.LeadsPerTemplate <= 0 || len(list) <= r.LeadsPerTemplate {
			continue
		}
		sort.Slice(list, func(i, j int) bool {
			if !list[i].CreatedAt.Equal(list[j].CreatedAt) {
				return list[i].CreatedAt.After(list[j].CreatedAt)
			}
			return list[i].ID > list[j].ID
		})
		drop = append(drop, list[r.LeadsPerTemplate:]...)
	}
	return dropAll(tx, tableLeads, drop, out)
}

func pruneOAuthCodes(tx *memdb.Txn, at time.Time, _ Retention, out Pruned) error {
	codes, err := all[OAuthCode](tx, tableOAuthCodes, "id")
	if err != nil {
		return err
	}
	var drop []*OAuthCode
	for _, c := range codes {
		if at.After(c.ExpiresAt.Add(codeKeep)) {
			drop = append(drop, c)
		}
	}
	return dropAll(tx, tableOAuthCodes, drop, out)
}

func pruneCertLocks(tx *memdb.Txn, at time.Time, _ Retention, out Pruned) error {
	locks, err := all[CertLock](tx, tableCertLocks, "id")
	if err != nil {
		return err
	}
	var drop []*CertLock
	for _, l := range locks {
		if l.Expires.Before(at) {
			drop = append(drop, l)
		}
	}
	return dropAll(tx, tableCertLocks, drop, out)
}
