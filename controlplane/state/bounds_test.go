package state

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// tableBound is what keeps one table of the replicated state from
// growing without end: a limit on how many rows there can be (bound), a
// time after which rows nothing needs are collected (retention), or both,
// and what enforces it. by names the functions that do (so renaming or
// removing one breaks this test, and a reader finds them).
type tableBound struct {
	bound, retention, enforced string
	by                         []any
}

// tableBounds lists every table of the schema. A new table fails
// TestEveryTableIsBounded until it has an entry here with a bound or a
// retention; docs/security.md's bounds are written from this list.
var tableBounds = map[string]tableBound{
	tableAccounts: {
		bound:    "one per account an operator creates (sandboxd admin, sandboxd dev); there is no self sign-up",
		enforced: "only operator routes write CreateAccount",
		by:       []any{(*Tx).CreateAccount},
	},
	tableWorkspaces: {
		bound:    "plan quota per owner (defaults: free 2, paid 50)",
		enforced: "quota checked inside the apply",
		by:       []any{(*Tx).CreateWorkspace},
	},
	tableMembers: {
		bound:    "plan quota of seats per workspace (defaults: free 5, paid 200; members and pending invitations together)",
		enforced: "quota checked inside the apply of the invitation",
		by:       []any{(*Tx).CreateInvitation, (*Tx).AcceptInvitation},
	},
	tableRoles: {
		bound:    fmt.Sprintf("%d custom roles per workspace", MaxRolesPerWorkspace),
		enforced: "cap checked inside the apply",
		by:       []any{(*Tx).PutRole},
	},
	tableTokens: {
		bound:     "personal tokens: plan quota per account (defaults: free 10, paid 100); OAuth tokens: 100 live per account (a new one retires the oldest), living 30 days",
		retention: "expired tokens are removed 30 days after their expiry",
		enforced:  "quota inside the apply; PruneState (hourly, leader)",
		by:        []any{(*Tx).CreateToken, (*Tx).RedeemOAuthCode, (*Tx).PruneState},
	},
	tableInvitations: {
		bound:     "pending: within the workspace's seats quota",
		retention: "pending ones 30 days after they expire, accepted ones 30 days after acceptance",
		enforced:  "quota inside the apply; PruneState (hourly, leader)",
		by:        []any{(*Tx).CreateInvitation, (*Tx).PruneState},
	},
	tableJobs: {
		bound:     "unfinished: the operations in flight on sites, templates, imports, runs, deploys, snapshots and moves (made by rate-limited writes)",
		retention: "finished jobs 7 days after they finished",
		enforced:  "PruneState (hourly, leader)",
		by:        []any{(*Tx).PruneState},
	},
	tableServers: {
		bound:    "one per control-plane server (joins need an operator's join token)",
		enforced: "membership changes only",
		by:       []any{(*Tx).UpsertServer, (*Tx).RemoveServer},
	},
	tableOutbox: {
		retention: "messages 7 days after they were kept (the outbox is used only without SMTP)",
		enforced:  "PruneState (hourly, leader)",
		by:        []any{(*Tx).PruneState},
	},
	tableSites: {
		bound:    "plan quota per workspace owner (defaults: free 3, paid 500); warm pools: the operator's stock per node and PHP version plus at most 10 per template",
		enforced: "quota inside the apply; a deleted site's row goes once its node cleaned up",
		by:       []any{(*Tx).CreateSiteWithJob, (*Tx).DeleteSite},
	},
	tableNodes: {
		bound:    "one per node agent (enrolling needs an operator's join token)",
		enforced: "registration by enrolled agents only",
		by:       []any{(*Tx).UpsertNode},
	},
	tableLibrary: {
		bound:    "plan quota per owner (defaults: free 20, paid 500)",
		enforced: "quota inside the apply",
		by:       []any{(*Tx).PutLibraryEntry},
	},
	tableIdempotency: {
		retention: "24 hours (IdempotencyTTL)",
		enforced:  "PruneIdempotency (hourly, leader)",
		by:        []any{(*Tx).PruneIdempotency},
	},
	tableTemplates: {
		bound:    "plan quota per owner (defaults: free 3, paid 200)",
		enforced: "quota inside the apply",
		by:       []any{(*Tx).CreateTemplateWithJob, (*Tx).CreateTemplate},
	},
	tableLeads: {
		bound:     "one per email-mode launch (launches are rate-limited per address and per template)",
		retention: "a template keeps its newest 10,000; a deleted template's go",
		enforced:  "PruneState (hourly, leader)",
		by:        []any{(*Tx).PruneState},
	},
	tableDemos: {
		bound:    "one per live launched site",
		enforced: "removed when its site ends (the leader's demo loop)",
		by:       []any{(*Tx).EndDemo},
	},
	tableWebhooks: {
		bound:    "one per workspace",
		enforced: "keyed by workspace",
		by:       []any{(*Tx).PutWebhook},
	},
	tableDeliveries: {
		bound: fmt.Sprintf("per workspace: %d pending (an event past it fails the oldest pending one) and the %d latest finished",
			MaxPendingDeliveries, keptDeliveries),
		enforced: "caps inside the apply; removed with the webhook",
		by:       []any{boundPending, pruneDeliveries, (*Tx).DeleteWebhook},
	},
	tableBlueprints: {
		bound:    "plan quota per owner (defaults: free 10, paid 500)",
		enforced: "quota inside the apply",
		by:       []any{(*Tx).CreateBlueprint},
	},
	tableRuns: {
		bound: fmt.Sprintf("a saved Blueprint keeps its %d newest finished runs; unfinished runs: one per job in flight", KeptRuns),
		retention: "a deleted Blueprint's finished runs go with it (its unfinished ones once they finish); " +
			"finished runs of an unsaved source 7 days after they finished",
		enforced: "cap inside CreateRun; DeleteBlueprint; PruneState (hourly, leader)",
		by:       []any{(*Tx).CreateRun, (*Tx).DeleteBlueprint, (*Tx).PruneState},
	},
	tableImports: {
		bound:     fmt.Sprintf("%d unfinished per workspace; a ready one per site it restored", MaxOpenImports),
		retention: "failed, cancelled and site_deleted imports 30 days after their last change",
		enforced:  "cap inside the apply; PruneState (hourly, leader)",
		by:        []any{(*Tx).CreateImport, (*Tx).PruneState},
	},
	tableOAuthClients: {
		bound:     "20 registrations an hour per address (the API's limiter); 10,000 in all (--oauth-max-clients)",
		retention: "clients never given a token 24 h after registering; clients whose tokens are all gone 30 days after",
		enforced:  "RegisterOAuthClient's cap inside the apply; PruneOAuthClients (hourly, leader)",
		by:        []any{(*Tx).RegisterOAuthClient, (*Tx).PruneOAuthClients},
	},
	tableOAuthCodes: {
		bound:     "one per approved consent",
		retention: "codes live 60 s and are forgotten 10 minutes after their expiry",
		enforced:  "CreateOAuthCode and PruneState (hourly, leader)",
		by:        []any{(*Tx).CreateOAuthCode, (*Tx).PruneState},
	},
	tableDomains: {
		bound:     "one per site",
		retention: "a pending_dns claim is released 72 h after it became pending (or taken over by TXT proof)",
		enforced:  "keyed by site; removed on disconnect or with the site; ExpireDomainClaims (the leader's domain loop)",
		by:        []any{(*Tx).ConnectDomain, (*Tx).DisconnectDomain, (*Tx).ExpireDomainClaims, (*Tx).TakeOverDomain},
	},
	tableCertOrders: {
		bound:     fmt.Sprintf("%d orders (and the operator's order budgets per window)", MaxCertOrders),
		retention: "orders older than the longest budget window or cool-down (7 days by default) go with each new order",
		enforced:  "cap and prune inside OrderCert's apply",
		by:        []any{(*Tx).OrderCert},
	},
	tableCertData: {
		bound:     fmt.Sprintf("%d entries", MaxCertData),
		retention: "expired certificates are removed by the edges' storage cleaning (daily, 7 days after expiry)",
		enforced:  "cap inside the apply; edge certmagic.CleanStorage",
		by:        []any{(*Tx).PutCertData, (*Tx).DeleteCertData},
	},
	tableCertLocks: {
		bound:     "one per certificate operation in progress",
		retention: "leases are removed when released, or once expired",
		enforced:  "UnlockCert; PruneState (hourly, leader)",
		by:        []any{(*Tx).UnlockCert, (*Tx).PruneState},
	},
	tableSSHKeys: {
		bound:    "plan quota per account (defaults: free 10, paid 100)",
		enforced: "quota inside the apply",
		by:       []any{(*Tx).AddSSHKey},
	},
	tableCheckpoints: {
		bound:    "plan quota per site (defaults: free 3, paid 50)",
		enforced: "quota inside the apply; removed with the site, or when it moves to another node",
		by:       []any{(*Tx).AddCheckpoint},
	},
	tableRepos: {
		bound:    fmt.Sprintf("%d per site", MaxRepositoriesPerSite),
		enforced: "cap inside the apply; removed with the site",
		by:       []any{(*Tx).CreateRepository},
	},
	tableClusterCA: {
		bound:    "one row",
		enforced: "PutClusterCA refuses a second CA",
		by:       []any{(*Tx).PutClusterCA},
	},
	tableClusterMembers: {
		bound:    "one per enrolled server, agent or edge (each join spends an operator's join token)",
		enforced: "UseJoinToken",
		by:       []any{(*Tx).UseJoinToken},
	},
	tableJoinTokens: {
		bound:    "one per join token an operator makes",
		enforced: "operator routes only",
		by:       []any{(*Tx).CreateJoinToken},
	},
	tableOperatorTokens: {
		bound:    "one per operator token an operator makes",
		enforced: "operator routes only",
		by:       []any{(*Tx).CreateOperatorToken, (*Tx).DeleteOperatorToken},
	},
	tableSnapshots: {
		bound:    "the configured number per site (default 2)",
		enforced: "AddSnapshot keeps the newest; removed with the site",
		by:       []any{(*Tx).AddSnapshot},
	},
	tableTombstones: {
		bound:     "one per deleted site",
		retention: "30 days (sitejobs.TombstoneTTL)",
		enforced:  "PruneTombstones (hourly, leader's fleet loop)",
		by:        []any{(*Tx).PruneTombstones},
	},
}

// TestEveryTableIsBounded: every table of the schema (read from the
// schema itself, so a new one is seen) has a bound or a retention and
// says what enforces it, every entry names a table that exists, and
// every table is written to snapshots.
func TestEveryTableIsBounded(t *testing.T) {
	sch := schema()
	var names []string
	for name := range sch.Tables {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, ok := tableBounds[name]
		switch {
		case !ok:
			t.Errorf("table %q has no entry in tableBounds: give it a bound (a cap in its writes) or a retention (a prune) and list it", name)
			continue
		case b.bound == "" && b.retention == "":
			t.Errorf("table %q has neither a bound nor a retention", name)
		case b.enforced == "":
			t.Errorf("table %q does not say what enforces its bound", name)
		}
		for _, fn := range b.by {
			if v := reflect.ValueOf(fn); v.Kind() != reflect.Func || v.IsNil() {
				t.Errorf("table %q: %v is not a function", name, fn)
			}
		}
		if !slices.Contains(tables, name) {
			t.Errorf("table %q is not in the snapshot's table list", name)
		}
	}
	for name := range tableBounds {
		if sch.Tables[name] == nil {
			t.Errorf("tableBounds names %q, which the schema no longer has", name)
		}
	}
	if t.Failed() {
		return
	}
	for _, name := range names {
		b := tableBounds[name]
		var by []string
		for _, fn := range b.by {
			f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
			by = append(by, strings.TrimSuffix(f[strings.LastIndex(f, "/")+1:], "-fm"))
		}
		t.Logf("%-16s bound: %s | retention: %s | enforced: %s (%s)", name, orNone(b.bound), orNone(b.retention), b.enforced,
			strings.Join(by, ", "))
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// TestPruneStateCollects: rows past their retention go, younger ones
// and unfinished work stay, for each table PruneState looks after.
func TestPruneStateCollects(t *testing.T) {
	day := 24 * time.Hour
	r := DefaultRetention()
	now := t0.Add(365 * day)
	cases := []struct {
		table string
		// setup writes rows: those whose id starts with "old" must go,
		// the others must stay.
		setup func(t *testing.T, s *Store)
		keep  Retention
	}{
		{tableJobs, func(t *testing.T, s *Store) {
			for _, j := range []struct {
				id     string
				status string
				at     time.Time
			}{{"old_done", JobSucceeded, now.Add(-8 * day)}, {"old_failed", JobFailed, now.Add(-30 * day)},
				{"recent", JobSucceeded, now.Add(-6 * day)}, {"queued", "", now.Add(-300 * day)}, {"running", JobRunning, now.Add(-300 * day)}} {
				must(t, s.Update(func(tx *Tx) error { return tx.CreateJob(Job{ID: j.id, Type: "t", CreatedAt: j.at}) }))
				if j.status != "" {
					must(t, s.Update(func(tx *Tx) error {
						_, err := tx.UpdateJob(JobUpdate{ID: j.id, Status: j.status, At: j.at})
						return err
					}))
				}
			}
		}, r},
		{tableOutbox, func(t *testing.T, s *Store) {
			must(t, s.Update(func(tx *Tx) error { return tx.AppendMail(Mail{ID: "old", CreatedAt: now.Add(-8 * day)}) }))
			must(t, s.Update(func(tx *Tx) error { return tx.AppendMail(Mail{ID: "new", CreatedAt: now.Add(-time.Hour)}) }))
		}, r},
		{tableInvitations, func(t *testing.T, s *Store) {
			for _, inv := range []Invitation{
				{ID: "old_expired", Email: "a@x.io", ExpiresAt: now.Add(-31 * day)},
				{ID: "expired_lately", Email: "b@x.io", ExpiresAt: now.Add(-29 * day)},
				{ID: "pending", Email: "c@x.io", ExpiresAt: now.Add(day)},
				{ID: "old_accepted", Email: "d@x.io", ExpiresAt: now.Add(day), Status: InvitationAccepted, AcceptedAt: ptr(now.Add(-31 * day))},
				{ID: "accepted", Email: "e@x.io", ExpiresAt: now.Add(-300 * day), Status: InvitationAccepted, AcceptedAt: ptr(now.Add(-day))},
			} {
				inv.WorkspaceID = "ws_a"
				must(t, s.Update(func(tx *Tx) error { return insert(tx.tx, tableInvitations, &inv) }))
			}
		}, r},
		{tableTokens, func(t *testing.T, s *Store) {
			for _, tok := range []Token{
				{ID: "old_expired", Hash: "h_old", ExpiresAt: ptr(now.Add(-31 * day))},
				{ID: "expired_lately", Hash: "h_late", ExpiresAt: ptr(now.Add(-day))},
				{ID: "forever", Hash: "h_forever"},
				{ID: "old_oauth", Hash: "h_oauth", Kind: TokenOAuth, ExpiresAt: ptr(now.Add(-60 * day))},
			} {
				tok.UserID = "usr_a"
				must(t, s.Update(func(tx *Tx) error { return tx.CreateToken(tok, Quota{}) }))
			}
		}, r},
		{tableRuns, func(t *testing.T, s *Store) {
			must(t, s.Update(func(tx *Tx) error {
				return tx.CreateBlueprint(Blueprint{ID: "bp_live", WorkspaceID: "ws_a", UserID: "usr_a", Slug: "live"}, Quota{})
			}))
			must(t, s.Update(func(tx *Tx) error {
				return tx.CreateBlueprint(Blueprint{ID: "bp_gone", WorkspaceID: "ws_a", UserID: "usr_a", Slug: "gone"}, Quota{})
			}))
			for _, run := range []BlueprintRun{
				{ID: "live_done", BlueprintID: "bp_live", Status: RunSucceeded},
				{ID: "old_gone_done", BlueprintID: "bp_gone", Status: RunPending},
				{ID: "gone_running", BlueprintID: "bp_gone", Status: RunRunning},
				// Finished, but its job (a bake freezing its template) is not.
				{ID: "gone_job_running", BlueprintID: "bp_gone", Status: RunSucceeded, JobID: "job_bake"},
				{ID: "old_unsaved", Status: RunFailed, FinishedAt: ptr(now.Add(-8 * day))},
				{ID: "unsaved_lately", Status: RunSucceeded, FinishedAt: ptr(now.Add(-6 * day))},
				{ID: "unsaved_running", Status: RunRunning},
			} {
				run.WorkspaceID, run.CreatedAt = "ws_a", now.Add(-300*day)
				must(t, s.Update(func(tx *Tx) error { return insert(tx.tx, tableRuns, &run) }))
			}
			must(t, s.Update(func(tx *Tx) error { return tx.CreateJob(Job{ID: "job_bake", Type: "bake", CreatedAt: now}) }))
			// Finished after the Blueprint was deleted: collected by the prune.
			must(t, s.Update(func(tx *Tx) error { return tx.DeleteBlueprint("bp_gone") }))
			done, _ := s.BlueprintRun("old_gone_done")
			c := *done
			c.Status, c.FinishedAt = RunSucceeded, &now
			must(t, s.Update(func(tx *Tx) error { return tx.PutRun(c) }))
		}, r},
		{tableImports, func(t *testing.T, s *Store) {
			for _, imp := range []Import{
				{ID: "old_failed", Status: ImportFailed, UpdatedAt: now.Add(-31 * day)},
				{ID: "old_cancelled", Status: ImportCancelled, UpdatedAt: now.Add(-31 * day)},
				{ID: "old_site_deleted", Status: ImportSiteDeleted, UpdatedAt: now.Add(-31 * day)},
				{ID: "failed_lately", Status: ImportFailed, UpdatedAt: now.Add(-29 * day)},
				{ID: "ready", Status: ImportReady, UpdatedAt: now.Add(-300 * day)},
				{ID: "restoring", Status: ImportRestoring, UpdatedAt: now.Add(-300 * day)},
			} {
				imp.WorkspaceID = "ws_a"
				must(t, s.Update(func(tx *Tx) error { return insert(tx.tx, tableImports, &imp) }))
			}
		}, r},
		{tableLeads, func(t *testing.T, s *Store) {
			seedTemplate(t, s) // tpl_1
			for i := range 5 {
				id := fmt.Sprintf("lead_%d", i)
				if i < 2 {
					id = "old_" + id // the two oldest beyond the kept three
				}
				must(t, s.Update(func(tx *Tx) error {
					return tx.AddLead(Lead{ID: id, TemplateID: "tpl_1", WorkspaceID: "ws_a", CreatedAt: t0.Add(time.Duration(i) * time.Minute)})
				}))
			}
			must(t, s.Update(func(tx *Tx) error {
				return insert(tx.tx, tableLeads, &Lead{ID: "old_of_deleted", TemplateID: "tpl_gone", WorkspaceID: "ws_a", CreatedAt: now})
			}))
		}, Retention{LeadsPerTemplate: 3}},
		{tableOAuthCodes, func(t *testing.T, s *Store) {
			must(t, s.Update(func(tx *Tx) error {
				return tx.RegisterOAuthClient(OAuthClient{ID: "cli_1", Name: "c", CreatedAt: now}, 0)
			}))
			for _, c := range []OAuthCode{{ID: "old", ExpiresAt: now.Add(-11 * time.Minute)}, {ID: "kept", ExpiresAt: now.Add(-9 * time.Minute)}} {
				c.ClientID, c.UserID = "cli_1", "usr_a"
				must(t, s.Update(func(tx *Tx) error { return insert(tx.tx, tableOAuthCodes, &c) }))
			}
		}, r},
		{tableCertLocks, func(t *testing.T, s *Store) {
			must(t, s.Update(func(tx *Tx) error {
				return tx.LockCert(CertLock{Name: "old", Owner: "e1", Expires: now.Add(-time.Second)}, t0)
			}))
			must(t, s.Update(func(tx *Tx) error {
				return tx.LockCert(CertLock{Name: "held", Owner: "e1", Expires: now.Add(time.Minute)}, t0)
			}))
		}, r},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		seen[tc.table] = true
		t.Run(tc.table, func(t *testing.T) {
			s := seed(t)
			seeded := ids(t, s, tc.table)
			tc.setup(t, s)
			written := ids(t, s, tc.table)
			var pruned Pruned
			must(t, s.Update(func(tx *Tx) (err error) {
				pruned, err = tx.PruneState(now, tc.keep)
				return err
			}))
			left := ids(t, s, tc.table)
			olds := 0
			for id := range written {
				switch {
				case seeded[id]: // the seed's rows are not this case's
				case strings.HasPrefix(id, "old"):
					olds++
					if left[id] {
						t.Errorf("%s %s outlived its retention", tc.table, id)
					}
				case !left[id]:
					t.Errorf("%s %s was pruned but must stay", tc.table, id)
				}
			}
			if olds == 0 || pruned[tc.table] < olds {
				t.Errorf("%d rows past their retention, the prune reports %v", olds, pruned)
			}
		})
	}
	// Every table PruneState looks after is exercised above.
	for _, table := range []string{tableJobs, tableOutbox, tableInvitations, tableTokens, tableRuns, tableImports, tableLeads,
		tableOAuthCodes, tableCertLocks} {
		if !seen[table] {
			t.Errorf("no case for %s", table)
		}
	}
}

// ids lists the ids of a table's rows (by its id index's field).
func ids(t *testing.T, s *Store, table string) map[string]bool {
	t.Helper()
	it, err := s.read().Get(table, "id")
	must(t, err)
	out := map[string]bool{}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		v := reflect.ValueOf(raw).Elem()
		for _, f := range []string{"ID", "Name", "Key", "SiteID", "WorkspaceID"} {
			if fv := v.FieldByName(f); fv.IsValid() && fv.Kind() == reflect.String {
				out[fv.String()] = true
				break
			}
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// TestRunsOfADeletedBlueprintAreCollected: deleting a Blueprint takes
// its finished runs with it; one still running carries on and is
// collected by the prune once it has finished; a saved Blueprint keeps
// only its KeptRuns newest finished runs however often it runs.
func TestRunsOfADeletedBlueprintAreCollected(t *testing.T) {
	s := seed(t)
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateBlueprint(Blueprint{ID: "bp_1", WorkspaceID: "ws_a", UserID: "usr_a", Slug: "one", CreatedAt: t0}, Quota{})
	}))
	const runs = 3 * KeptRuns
	for i := range runs {
		run := BlueprintRun{ID: fmt.Sprintf("bpr_%04d", i), BlueprintID: "bp_1", WorkspaceID: "ws_a", SiteID: "site_1", Mode: RunApply,
			Status: RunPending, Source: []byte(`{"steps":[]}`), CreatedAt: t0.Add(time.Duration(i) * time.Minute)}
		must(t, s.Update(func(tx *Tx) error { return tx.CreateRun(run) }))
		if i == runs-1 {
			break // the last one is still running when the Blueprint goes
		}
		run.Status, run.FinishedAt = RunSucceeded, ptr(run.CreatedAt.Add(time.Second))
		must(t, s.Update(func(tx *Tx) error { return tx.PutRun(run) }))
	}
	if rs, _ := s.RunsOf("bp_1"); len(rs) > KeptRuns+1 {
		t.Fatalf("a Blueprint run %d times keeps %d runs", runs, len(rs))
	}
	must(t, s.Update(func(tx *Tx) error { return tx.DeleteBlueprint("bp_1") }))
	rs, _ := s.RunsOf("bp_1")
	if len(rs) != 1 || rs[0].ID != fmt.Sprintf("bpr_%04d", runs-1) {
		t.Fatalf("after the Blueprint was deleted its runs are %d (want only the unfinished one)", len(rs))
	}
	last := *rs[0]
	last.Status, last.FinishedAt = RunFailed, ptr(last.CreatedAt.Add(time.Second))
	must(t, s.Update(func(tx *Tx) error { return tx.PutRun(last) }))
	must(t, s.Update(func(tx *Tx) error {
		_, err := tx.PruneState(last.CreatedAt.Add(time.Minute), DefaultRetention())
		return err
	}))
	if rs, _ := s.RunsOf("bp_1"); len(rs) != 0 {
		t.Fatalf("%d runs of a deleted Blueprint outlived the prune", len(rs))
	}
}

// TestRolesAreCapped: a workspace's 101st custom role is refused;
// changing an existing one still works at the cap.
func TestRolesAreCapped(t *testing.T) {
	s := seed(t) // ws_a holds role_1
	for i := 1; i < MaxRolesPerWorkspace; i++ {
		must(t, s.Update(func(tx *Tx) error {
			return tx.PutRole(Role{ID: fmt.Sprintf("role_x%d", i), WorkspaceID: "ws_a", Name: fmt.Sprintf("r%d", i), Capabilities: []string{}}, false)
		}))
	}
	err := s.Update(func(tx *Tx) error {
		return tx.PutRole(Role{ID: "role_over", WorkspaceID: "ws_a", Name: "over", Capabilities: []string{}}, false)
	})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("role %d: %v", MaxRolesPerWorkspace+1, err)
	}
	must(t, s.Update(func(tx *Tx) error {
		return tx.PutRole(Role{ID: "role_1", WorkspaceID: "ws_a", Name: "Renamed", Capabilities: []string{}}, true)
	}))
}
