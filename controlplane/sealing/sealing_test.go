package sealing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/sealingspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/seal"
)

var (
	keyA = strings.Repeat("a", 43)
	keyB = strings.Repeat("b", 43)
	keyC = strings.Repeat("c", 43)
)

func TestParse(t *testing.T) {
	tests := []struct {
		setting string
		ids     []string
		errHas  string
	}{
		{keyA, []string{seal.KeyID(keyA)}, ""},
		{keyB + "\n" + keyA + "\n", []string{seal.KeyID(keyB), seal.KeyID(keyA)}, ""},
		{keyB + "," + keyA, []string{seal.KeyID(keyB), seal.KeyID(keyA)}, ""},
		{"", nil, "no sealing key"},
		{keyB + "\n\n" + keyA, nil, "empty key"},
		{keyB + ",short", nil, "sealing key 2 of 2 is too short"},
		{keyA + "," + keyA, nil, "same key"},
	}
	for _, tt := range tests {
		r, err := Parse(tt.setting)
		if tt.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("Parse(%.10q…) = %v; want an error with %q", tt.setting, err, tt.errHas)
			} else if strings.Contains(err.Error(), keyA) || strings.Contains(err.Error(), keyB) {
				t.Errorf("Parse error shows a key: %v", err)
			}
			continue
		}
		if err != nil || strings.Join(r.IDs(), ",") != strings.Join(tt.ids, ",") || r.CurrentID() != tt.ids[0] {
			t.Errorf("Parse(%.10q…) = %v, %v; want ids %v", tt.setting, r, err, tt.ids)
		}
	}
	one, _ := Parse(keyA)
	two, _ := Parse(keyA + "\n" + keyB)
	d1, _ := one.Derive("label")
	d2, _ := two.Derive("label")
	if string(d1) != string(d2) || len(d1) != 32 {
		t.Fatal("Derive depends on more than the current key")
	}
}

// countingApplier counts applies and can write before the first reseal,
// as a concurrent writer would.
type countingApplier struct {
	fsm.Applier
	reseals int
	before  func()
}

func (c *countingApplier) Apply(ctx context.Context, cmd fsm.Command) (any, error) {
	if _, ok := cmd.(fsm.ResealValues); ok {
		c.reseals++
		if c.before != nil {
			c.before()
			c.before = nil
		}
	}
	return c.Applier.Apply(ctx, cmd)
}

// TestRotate: values sealed with the old key are sealed again with the
// new one and still open; a value changed meanwhile is picked up by a
// second pass; values no key opens are counted, never touched; a second
// run reseals nothing; one key is nothing to rotate.
func TestRotate(t *testing.T) {
	store := state.NewStore()
	local := fsm.NewLocal(store)
	ctx := context.Background()
	ringA, _ := Parse(keyA)
	ringBA, _ := Parse(keyB + "\n" + keyA)
	ringC, _ := Parse(keyC)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	apply := func(c fsm.Command) {
		t.Helper()
		if _, err := local.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	certs := 150 // more than one batch
	apply(fsm.PutClusterCA{CA: state.ClusterCA{CertPEM: []byte("cert"), Fingerprint: "fp", CreatedAt: t0,
		KeySealed: ringA.Sealer(PurposeClusterCA).Seal("ca key", ClusterCAAAD)}, First: state.ClusterMember{ID: "server/s1"}})
	for i := range certs {
		key := fmt.Sprintf("certificates/acme/site-%03d.crt", i)
		apply(fsm.PutCertData{Data: state.CertData{Key: key, Value: ringA.Sealer(PurposeCerts).Seal("pem "+key, key), Modified: t0}})
	}
	// A value sealed before values named their key: the same bytes
	// without the version byte and key id.
	legacy := ringA.Sealer(PurposeCerts).Seal("pem legacy", "legacy")[1+seal.KeyIDSize:]
	apply(fsm.PutCertData{Data: state.CertData{Key: "legacy", Value: legacy, Modified: t0}})
	// A value of another cluster's key, and one sealed for another record.
	apply(fsm.PutCertData{Data: state.CertData{Key: "foreign", Value: ringC.Sealer(PurposeCerts).Seal("x", "foreign"), Modified: t0}})
	apply(fsm.PutCertData{Data: state.CertData{Key: "moved", Value: ringA.Sealer(PurposeCerts).Seal("x", "elsewhere"), Modified: t0}})

	raft := &countingApplier{Applier: local}
	r := &Rotator{Store: store, Raft: raft, Keys: ringBA}
	// A writer seals one value again with the old key after the walk
	// read it: the swap leaves it, the next pass reseals it.
	raft.before = func() {
		apply(fsm.PutCertData{Data: state.CertData{Key: "certificates/acme/site-000.crt",
			Value: ringA.Sealer(PurposeCerts).Seal("pem changed", "certificates/acme/site-000.crt"), Modified: t0}})
	}
	dry, err := r.Rotate(ctx, true)
	if err != nil || dry.Resealed != certs+2 || raft.reseals != 0 {
		t.Fatalf("dry run: %+v, %v, %d applies", dry, err, raft.reseals)
	}
	got, err := r.Rotate(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	unreadable := map[sealingspec.Unreadable]bool{}
	for _, u := range got.Unreadable {
		unreadable[u] = true
	}
	if got.Resealed != certs+2 || got.AlreadyCurrent != 0 || got.KeyID != seal.KeyID(keyB) || len(unreadable) != 2 ||
		!unreadable[sealingspec.Unreadable{Kind: state.SealedCertData, KeyID: seal.KeyID(keyA), Count: 1}] || !unreadable[sealingspec.Unreadable{Kind: state.SealedCertData, KeyID: seal.KeyID(keyC), Count: 1}] {
		t.Fatalf("rotation = %+v; want %d resealed, one unreadable value of key A's and one of key C's", got, certs+2)
	}
	if raft.reseals != 3 { // two batches, then the changed value
		t.Fatalf("%d reseal applies, want 3", raft.reseals)
	}
	// Every value opens with the new key alone, and says so.
	ringB, _ := Parse(keyB)
	vals, _ := store.SealedValues()
	for _, v := range vals {
		if v.ID == "foreign" || v.ID == "moved" {
			continue
		}
		k := kinds[v.Kind]
		plain, err := ringB.Sealer(k.purpose).Open(v.Sealed, k.aad(v.ID))
		if err != nil || seal.SealedWith(v.Sealed) != seal.KeyID(keyB) {
			t.Fatalf("%s %s: %v, sealed with %s", v.Kind, v.ID, err, seal.SealedWith(v.Sealed))
		}
		if v.ID == "certificates/acme/site-000.crt" && plain != "pem changed" || v.ID == "legacy" && plain != "pem legacy" {
			t.Fatalf("%s: %q", v.ID, plain)
		}
	}
	if d, _ := store.CertData("foreign"); seal.SealedWith(d.Value) != seal.KeyID(keyC) {
		t.Fatal("an unreadable value was changed")
	}

	again, err := r.Rotate(ctx, false)
	if err != nil || again.Resealed != 0 || again.AlreadyCurrent != certs+2 || len(again.Unreadable) != 2 {
		t.Fatalf("second run: %+v, %v", again, err)
	}

	var ae *apierr.Error
	if _, err := (&Rotator{Store: store, Raft: local, Keys: ringB}).Rotate(ctx, false); !errors.As(err, &ae) || ae.Status != 409 ||
		!strings.Contains(ae.Message, "nothing to rotate") || !strings.Contains(ae.Message, ringB.CurrentID()) {
		t.Fatalf("one key: %v", err)
	}

	if st := ringB.Check(store); st.ClusterCA != sealingspec.CAOK || st.ClusterCAKeyID != seal.KeyID(keyB) {
		t.Fatalf("check with the new key: %+v", st)
	}
	st := ringA.Check(store)
	if st.ClusterCA != sealingspec.CAUnreadable || !strings.Contains(st.Mismatch(), seal.KeyID(keyA)) || !strings.Contains(st.Mismatch(), "sealed with key "+seal.KeyID(keyB)) {
		t.Fatalf("check with the old key only: %+v: %s", st, st.Mismatch())
	}
	if st := ringA.Check(state.NewStore()); st.ClusterCA != sealingspec.CAAbsent {
		t.Fatalf("check without a CA: %+v", st)
	}
}

// TestEveryKindHasAPurpose: a kind of sealed value the state lists but
// the rotation cannot seal again would stop every rotation.
func TestEveryKindHasAPurpose(t *testing.T) {
	for _, k := range state.SealedKinds {
		if _, ok := kinds[k]; !ok {
			t.Errorf("no purpose for sealed values of kind %s", k)
		}
	}
	if len(kinds) != len(state.SealedKinds) {
		t.Errorf("%d kinds here, %d in the state", len(kinds), len(state.SealedKinds))
	}
}
