package state

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func seed(t *testing.T) *Store {
	t.Helper()
	s := NewStore()
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateAccount(Account{ID: "usr_a", Email: "A@x.io", Plan: PlanFree, CreatedAt: t0}, Workspace{ID: "ws_a", Name: "A", CreatedAt: t0})
	}))
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateAccount(Account{ID: "usr_b", Email: "b@x.io", Plan: PlanPaid, CreatedAt: t0}, Workspace{ID: "ws_b", Name: "B", CreatedAt: t0})
	}))
	must(t, s.Update(func(tx *Tx) error {
		return tx.PutRole(Role{ID: "role_1", WorkspaceID: "ws_a", Name: "Viewer", Capabilities: []string{}}, false)
	}))
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateToken(Token{ID: "tok_1", UserID: "usr_a", Hash: "h1", CreatedAt: t0}, Quota{})
	}))
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateInvitation(Invitation{ID: "inv_1", WorkspaceID: "ws_a", Email: "b@x.io", CustomRoleID: "role_1", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, Quota{})
	}))
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateJob(Job{ID: "job_1", Type: "t", WorkspaceID: "ws_a", CreatedAt: t0})
	}))
	must(t, s.Update(func(tx *Tx) error { return tx.UpsertServer(Server{ID: "s1", RaftAddr: "r", APIAddr: "a"}) }))
	must(t, s.Update(func(tx *Tx) error { return tx.AppendMail(Mail{ID: "mail_1", To: "b@x.io", CreatedAt: t0}) }))
	return s
}

// seedTemplate adds template tpl_1 (slug starter) to ws_a, with its job.
func seedTemplate(t *testing.T, s *Store) {
	t.Helper()
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateTemplateWithJob(Template{ID: "tpl_1", WorkspaceID: "ws_a", UserID: "usr_a", Slug: "starter", Status: TemplateBuilding,
			Launch: Launch{QuotaMode: "visitor", Branding: LaunchBranding{Headline: "Try it"}}, CreatedAt: t0},
			Job{ID: "job_tpl", Type: "snapshot_template", WorkspaceID: "ws_a", CreatedAt: t0}, Quota{})
	}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWritesKeepInvariants(t *testing.T) {
	cases := []struct {
		name string
		op   func(s *Store) error
		want error
	}{
		{"duplicate email any case", func(s *Store) error {
			return s.Update(func(tx *Tx) error {
				return tx.CreateAccount(Account{ID: "usr_c", Email: "a@X.IO"}, Workspace{ID: "ws_c"})
			})
		}, ErrConflict},
		{"token for unknown account", func(s *Store) error {
			return s.Update(func(tx *Tx) error { return tx.CreateToken(Token{ID: "tok_2", UserID: "usr_x", Hash: "h2"}, Quota{}) })
		}, ErrNotFound},
		{"revoke someone else's token", func(s *Store) error { return s.Update(func(tx *Tx) error { return tx.RevokeToken("usr_b", "tok_1") }) }, ErrNotFound},
		{"second pending invitation", func(s *Store) error {
			return s.Update(func(tx *Tx) error {
				return tx.CreateInvitation(Invitation{ID: "inv_2", WorkspaceID: "ws_a", Email: "B@x.io", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, Quota{})
			})
		}, ErrConflict},
		{"invite with another workspace's role", func(s *Store) error {
			return s.Update(func(tx *Tx) error {
				return tx.CreateInvitation(Invitation{ID: "inv_3", WorkspaceID: "ws_b", Email: "c@x.io", CustomRoleID: "role_1", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, Quota{})
			})
		}, ErrNotFound},
		{"invite an existing member", func(s *Store) error {
			return s.Update(func(tx *Tx) error {
				return tx.CreateInvitation(Invitation{ID: "inv_4", WorkspaceID: "ws_a", Email: "a@x.io", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, Quota{})
			})
		}, ErrConflict},
		{"accept someone else's invitation", func(s *Store) error {
			_, err := upd(s, func(tx *Tx) (*Member, error) { return tx.AcceptInvitation("inv_1", "usr_a", t0) })
			return err
		}, ErrNotFound},
		{"accept expired invitation", func(s *Store) error {
			_, err := upd(s, func(tx *Tx) (*Member, error) { return tx.AcceptInvitation("inv_1", "usr_b", t0.Add(2*time.Hour)) })
			return err
		}, ErrConflict},
		{"delete role offered by an invitation", func(s *Store) error {
			return s.Update(func(tx *Tx) error { return tx.DeleteRole("ws_a", "role_1", t0) })
		}, ErrRoleInUse},
		{"delete role from wrong workspace", func(s *Store) error {
			return s.Update(func(tx *Tx) error { return tx.DeleteRole("ws_b", "role_1", t0) })
		}, ErrNotFound},
		{"duplicate role name", func(s *Store) error {
			return s.Update(func(tx *Tx) error { return tx.PutRole(Role{ID: "role_2", WorkspaceID: "ws_a", Name: "VIEWER"}, false) })
		}, ErrConflict},
		{"update a missing role", func(s *Store) error {
			return s.Update(func(tx *Tx) error { return tx.PutRole(Role{ID: "role_9", WorkspaceID: "ws_a", Name: "x"}, true) })
		}, ErrNotFound},
		{"remove the owner", func(s *Store) error { return s.Update(func(tx *Tx) error { return tx.RemoveMember("ws_a", "usr_a") }) }, ErrConflict},
		{"change the owner's role", func(s *Store) error {
			_, err := upd(s, func(tx *Tx) (*Member, error) { return tx.SetMemberRole("ws_a", "usr_a", "role_1") })
			return err
		}, ErrConflict},
		{"bad job status", func(s *Store) error {
			_, err := upd(s, func(tx *Tx) (*Job, error) { return tx.UpdateJob(JobUpdate{ID: "job_1", Status: "paused"}) })
			return err
		}, ErrInvalid},
		{"unknown job", func(s *Store) error {
			_, err := upd(s, func(tx *Tx) (*Job, error) { return tx.UpdateJob(JobUpdate{ID: "job_x", Status: JobRunning}) })
			return err
		}, ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := seed(t)
			var before bytes.Buffer
			if _, err := s.Snapshot().WriteTo(&before); err != nil {
				t.Fatal(err)
			}
			if err := tc.op(s); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var after bytes.Buffer
			if _, err := s.Snapshot().WriteTo(&after); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before.Bytes(), after.Bytes()) {
				t.Fatal("a rejected write changed the state")
			}
		})
	}
}

func TestInvitationAndJobLifecycle(t *testing.T) {
	s := seed(t)
	m, err := upd(s, func(tx *Tx) (*Member, error) { return tx.AcceptInvitation("inv_1", "usr_b", t0.Add(time.Minute)) })
	must(t, err)
	if m.CustomRoleID != "role_1" || m.Role != RoleMember {
		t.Fatalf("member %+v", m)
	}
	if err := s.Update(func(tx *Tx) error { return tx.DeleteRole("ws_a", "role_1", t0) }); !errors.Is(err, ErrRoleInUse) {
		t.Fatalf("role held by a member deleted: %v", err)
	}
	if _, err := upd(s, func(tx *Tx) (*Member, error) { return tx.SetMemberRole("ws_a", "usr_b", "") }); err != nil {
		t.Fatal(err)
	}
	must(t, s.Update(func(tx *Tx) error { return tx.DeleteRole("ws_a", "role_1", t0) }))

	// Creating a job twice is a no-op; transitions are one-way.
	must(t, s.Update(func(tx *Tx) error { return tx.CreateJob(Job{ID: "job_1", Type: "other"}) }))
	j, _ := s.Job("job_1")
	if j.Type != "t" {
		t.Fatal("re-created job overwrote the first")
	}
	_, err = upd(s, func(tx *Tx) (*Job, error) {
		return tx.UpdateJob(JobUpdate{ID: "job_1", Status: JobRunning, At: t0, Dispatch: true})
	})
	must(t, err)
	j, err = upd(s, func(tx *Tx) (*Job, error) {
		return tx.UpdateJob(JobUpdate{ID: "job_1", Status: JobRunning, Progress: 30, At: t0})
	})
	must(t, err)
	if j.Attempts != 1 || j.Progress != 30 {
		t.Fatalf("job %+v", j)
	}
	j, err = upd(s, func(tx *Tx) (*Job, error) { return tx.UpdateJob(JobUpdate{ID: "job_1", Status: JobSucceeded, At: t0}) })
	must(t, err)
	if j.Progress != 100 || j.FinishedAt == nil {
		t.Fatalf("job %+v", j)
	}
	if _, err := upd(s, func(tx *Tx) (*Job, error) { return tx.UpdateJob(JobUpdate{ID: "job_1", Status: JobRunning, At: t0}) }); !errors.Is(err, ErrConflict) {
		t.Fatalf("finished job changed: %v", err)
	}
	jobs, _, err := s.UnfinishedJobs()
	must(t, err)
	if len(jobs) != 0 {
		t.Fatalf("unfinished: %v", jobs)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := seed(t)
	seedTemplate(t, s)
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := NewStore()
	must(t, r.Update(func(tx *Tx) error {
		return tx.CreateAccount(Account{ID: "usr_old", Email: "old@x.io"}, Workspace{ID: "ws_old"})
	}))
	if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if old, _ := r.Account("usr_old"); old != nil {
		t.Fatal("restore kept rows that were not in the snapshot")
	}
	var again bytes.Buffer
	if _, err := r.Snapshot().WriteTo(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("restored state differs from the snapshot")
	}
	a1, _ := s.AccountByEmail("a@x.io")
	a2, _ := r.AccountByEmail("A@X.IO")
	if !reflect.DeepEqual(a1, a2) {
		t.Fatalf("%+v != %+v", a1, a2)
	}

	for name, bad := range map[string]string{
		"empty":         "",
		"wrong format":  `{"format":"other","version":1}`,
		"unknown table": `{"format":"sandboxd-state","version":1}` + "\n" + `{"t":"nope","r":{}}`,
		"truncated":     `{"format":"sandboxd-state","version":1}` + "\n" + `{"t":"accounts","r":{"id"`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := r.Restore(bytes.NewReader([]byte(bad))); err == nil {
				t.Fatal("bad snapshot accepted")
			}
			if a, _ := r.AccountByEmail("a@x.io"); a == nil {
				t.Fatal("a failed restore lost the current state")
			}
		})
	}
}

// upd runs one value-returning write in its own transaction.
func upd[T any](s *Store, fn func(*Tx) (T, error)) (T, error) {
	var out T
	err := s.Update(func(tx *Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	return out, err
}

func TestQuotasHoldInsideTheApply(t *testing.T) {
	s := seed(t)
	q := Quota{Plan: PlanFree, Resource: "apiTokens", Limit: 2}
	must(t, s.Update(func(tx *Tx) error { return tx.CreateToken(Token{ID: "tok_2", UserID: "usr_a", Hash: "h2"}, q) }))
	err := s.Update(func(tx *Tx) error { return tx.CreateToken(Token{ID: "tok_3", UserID: "usr_a", Hash: "h3"}, q) })
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Quota != q {
		t.Fatalf("third token: %v", err)
	}
	ws := Quota{Plan: PlanFree, Resource: "workspaces", Limit: 1}
	if err := s.Update(func(tx *Tx) error { return tx.CreateWorkspace(Workspace{ID: "ws_x", OwnerID: "usr_a"}, ws) }); !errors.As(err, &qe) {
		t.Fatalf("second workspace: %v", err)
	}
	// ws_a has its owner and one pending invitation: two seats.
	seats := Quota{Plan: PlanFree, Resource: "membersPerWorkspace", Limit: 2}
	err = s.Update(func(tx *Tx) error {
		return tx.CreateInvitation(Invitation{ID: "inv_9", WorkspaceID: "ws_a", Email: "z@x.io", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}, seats)
	})
	if !errors.As(err, &qe) {
		t.Fatalf("third seat: %v", err)
	}
	// An expired invitation frees its seat.
	err = s.Update(func(tx *Tx) error {
		return tx.CreateInvitation(Invitation{ID: "inv_9", WorkspaceID: "ws_a", Email: "z@x.io", CreatedAt: t0.Add(2 * time.Hour), ExpiresAt: t0.Add(3 * time.Hour)}, seats)
	})
	must(t, err)
}
