package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

func TestEncodeDecodeEveryCommand(t *testing.T) {
	cmds := []Command{
		CreateAccount{}, SetPlan{}, CreateToken{}, RevokeToken{}, CreateWorkspace{}, CreateInvitation{},
		AcceptInvitation{}, SetMemberRole{}, RemoveMember{}, PutRole{}, DeleteRole{}, CreateJob{},
		UpdateJob{}, UpsertServer{}, RemoveServer{}, AppendMail{}, RevokeInvitation{},
		CreateSite{}, UpdateSite{}, RemoveSite{}, UpsertNode{}, SetNodeStatus{}, SiteJob{},
		PutLibraryEntry{}, DeleteLibrary{}, SetLicense{}, LicenseRead{},
	}
	seen := map[Type]bool{}
	for _, c := range cmds {
		data, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(data)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if got.commandType() != c.commandType() {
			t.Fatalf("%T decoded as %T", c, got)
		}
		if seen[c.commandType()] {
			t.Fatalf("type %d used twice", c.commandType())
		}
		seen[c.commandType()] = true
	}
	if len(seen) != int(TypeLicenseRead) {
		t.Fatalf("%d commands tested, %d types exist: add the new one here", len(seen), TypeLicenseRead)
	}
}

func TestApplyRejectsUnknownAndReportsStoreErrors(t *testing.T) {
	f := New(state.NewStore(), discard())
	if _, ok := f.Apply(&raft.Log{Index: 1, Data: []byte{250, '{', '}'}}).(error); !ok {
		t.Fatal("unknown command applied")
	}
	if _, ok := f.Apply(&raft.Log{Index: 2}).(error); !ok {
		t.Fatal("empty entry applied")
	}
	data, _ := Encode(RevokeToken{UserID: "usr_x", TokenID: "tok_x"})
	if err, _ := f.Apply(&raft.Log{Index: 3, Data: data}).(error); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("got %v", err)
	}
}

// TestApplyBatchIsolatesRejections applies a batch whose middle command
// is refused: the others are applied, the refused one changes nothing and
// reports its own error.
func TestApplyBatchIsolatesRejections(t *testing.T) {
	store := state.NewStore()
	f := New(store, discard())
	enc := func(c Command) *raft.Log {
		data, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		return &raft.Log{Type: raft.LogCommand, Data: data}
	}
	acct := func(id, email, ws string) Command {
		return CreateAccount{Account: state.Account{ID: id, Email: email}, Workspace: state.Workspace{ID: ws}}
	}
	logs := []*raft.Log{
		enc(acct("usr_1", "a@x.io", "ws_1")),
		enc(acct("usr_2", "a@x.io", "ws_2")), // same email: refused
		{Type: raft.LogConfiguration},
		enc(acct("usr_3", "c@x.io", "ws_3")),
	}
	res := f.ApplyBatch(logs)
	if len(res) != 4 || res[0] != nil || res[2] != nil || res[3] != nil {
		t.Fatalf("results %v", res)
	}
	if err, _ := res[1].(error); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("refused command reported %v", res[1])
	}
	for id, want := range map[string]bool{"usr_1": true, "usr_2": false, "usr_3": true} {
		a, _ := store.Account(id)
		if (a != nil) != want {
			t.Errorf("account %s present=%v, want %v", id, a != nil, want)
		}
	}
	if ws, _ := store.Workspace("ws_2"); ws != nil {
		t.Error("refused command left its workspace behind")
	}
}
