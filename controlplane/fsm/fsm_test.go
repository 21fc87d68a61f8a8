package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// TestEveryCommandRoundTrips fills every field of every registered
// command, encodes it and decodes it back: a field that does not survive
// the log (unexported, wrong tag, lost in a custom codec) fails here.
func TestEveryCommandRoundTrips(t *testing.T) {
	for typ, mk := range registry {
		c := mk()
		fill(t, reflect.ValueOf(c).Elem(), reflect.TypeOf(c).Elem().Name())
		data, err := Encode(c)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if Type(data[0]) != typ {
			t.Fatalf("%T encoded as type %d, registered as %d", c, data[0], typ)
		}
		got, err := decode(data)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("%T changed in the log:\n sent %+v\n got  %+v", c, c, got)
		}
	}
}

// fill sets every field reachable from v to a non-zero value.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	if v.Type() == reflect.TypeFor[json.RawMessage]() {
		v.SetBytes([]byte(`{"path":"` + path + `"}`))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("v-" + path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(7 + len(path)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(3 + len(path)%50))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+".key")
		fill(t, e, path+".value")
		v.SetMapIndex(k, e)
	case reflect.Interface:
		if v.Type() == reflect.TypeFor[any]() {
			v.Set(reflect.ValueOf("v-" + path)) // a JSON value: a string travels as itself
			return
		}
		if v.Type() != reflect.TypeFor[Command]() {
			t.Fatalf("%s: cannot fill an interface %s", path, v.Type())
		}
		inner := &CreateToken{}
		fill(t, reflect.ValueOf(inner).Elem(), path)
		v.Set(reflect.ValueOf(inner))
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 23, 10, 0, 0, int(len(path))*1000, time.UTC)))
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				t.Fatalf("%s.%s is unexported: it would not travel through the log", path, f.Name)
			}
			fill(t, v.Field(i), path+"."+f.Name)
		}
	default:
		t.Fatalf("%s: no filler for %s", path, v.Kind())
	}
}

func TestIdempotentAppliesOnceAndRefusesAnotherRequest(t *testing.T) {
	store := state.NewStore()
	f := New(store, discard())
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	var idx uint64
	run := func(c Command) any {
		data, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		idx++
		return f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: data})
	}
	acct := func(id, email string) Command {
		return CreateAccount{Account: state.Account{ID: id, Email: email}, Workspace: state.Workspace{ID: "ws_" + id}}
	}
	rec := func(fp string, at time.Time) state.Idempotency {
		return state.Idempotency{Scope: "operator", Key: "k1", Fingerprint: fp, Status: 201, Body: []byte("first"), CreatedAt: at}
	}
	if res := run(Idempotent{Record: rec("fp-a", at), Command: acct("usr_1", "a@x.io")}); res != nil {
		t.Fatalf("first apply: %v", res)
	}
	// The same request again: nothing applied, the first answer returned.
	res := run(Idempotent{Record: rec("fp-a", at.Add(time.Hour)), Command: acct("usr_2", "b@x.io")})
	if prior, ok := res.(*state.Idempotency); !ok || string(prior.Body) != "first" {
		t.Fatalf("retry: %v", res)
	}
	if a, _ := store.Account("usr_2"); a != nil {
		t.Fatal("a retry with the same key applied its command")
	}
	// Another request under the key: refused.
	if err, _ := run(Idempotent{Record: rec("fp-b", at.Add(time.Hour)), Command: acct("usr_3", "c@x.io")}).(error); !errors.Is(err, state.ErrIdempotencyKeyReused) {
		t.Fatalf("reuse: %v", err)
	}
	// A refused command records no key.
	if err, _ := run(Idempotent{Record: state.Idempotency{Scope: "operator", Key: "k2", Fingerprint: "x", CreatedAt: at},
		Command: acct("usr_4", "a@x.io")}).(error); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("duplicate email: %v", err)
	}
	if r, _ := store.Idempotency("operator", "k2", at); r != nil {
		t.Fatal("a refused command left its key behind")
	}
	// After the TTL the key is free again, and pruning forgets it.
	later := at.Add(state.IdempotencyTTL)
	if r, _ := store.Idempotency("operator", "k1", later); r != nil {
		t.Fatal("an expired key still answers")
	}
	if n := run(PruneIdempotency{At: later}); n != 1 {
		t.Fatalf("pruned %v, want 1", n)
	}
	if res := run(Idempotent{Record: rec("fp-b", later), Command: acct("usr_5", "e@x.io")}); res != nil {
		t.Fatalf("an expired key was not reusable: %v", res)
	}
	// Wrapping a wrapper is refused before it reaches the log.
	if _, err := Encode(Idempotent{Record: rec("x", at), Command: Idempotent{Command: acct("usr_6", "f@x.io")}}); err == nil {
		t.Fatal("a nested idempotent command was encoded")
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
