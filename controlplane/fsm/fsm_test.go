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
		UpdateJob{}, UpsertServer{}, RemoveServer{}, AppendMail{},
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
	if len(seen) != int(TypeAppendMail) {
		t.Fatalf("%d commands tested, %d types exist: add the new one here", len(seen), TypeAppendMail)
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
