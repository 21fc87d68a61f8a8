package state

import (
	"bytes"
	"fmt"

	memdb "github.com/hashicorp/go-memdb"
)

// Kinds of sealed value: each names the one field of one table that holds
// it, so a rotation of the sealing key can find and replace every one.
const (
	SealedClusterCA      = "cluster-ca"         // ClusterCA.KeySealed
	SealedLibraryLicense = "library-license"    // LibraryEntry.LicenseSealed
	SealedReplay         = "idempotent-replay"  // Idempotency.Body
	SealedWebhookSecret  = "webhook-secret"     // Webhook.SealedSecret
	SealedGitToken       = "git-token"          // Repository.TokenSealed
	SealedGitDeployKey   = "git-deploy-key"     // Repository.DeployKeySealed
	SealedGitWebhook     = "git-webhook-secret" // Repository.WebhookSecretSealed
	SealedCertData       = "edge-certificate"   // CertData.Value
)

// SealedKinds lists every kind of sealed value, in the order
// SealedValues walks them.
var SealedKinds = []string{SealedClusterCA, SealedLibraryLicense, SealedReplay, SealedWebhookSecret,
	SealedGitToken, SealedGitDeployKey, SealedGitWebhook, SealedCertData}

// SealedValue is one sealed value of the state: its kind, the id of its
// row (the key of a certificate storage entry, the id of an idempotency
// record) and the ciphertext.
type SealedValue struct {
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	Sealed []byte `json:"sealed"`
}

// Reseal replaces one sealed value with the same secret sealed again, if
// the value is still Old.
type Reseal struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Old  []byte `json:"old"`
	New  []byte `json:"new"`
}

// sealedField reads and writes one kind's field on its table's rows.
type sealedField struct {
	table string
	id    func(row any) string
	get   func(row any) []byte
	// with returns a copy of row that holds v.
	with func(row any, v []byte) any
}

var sealedFields = map[string]sealedField{
	SealedClusterCA: {tableClusterCA, func(r any) string { return r.(*ClusterCA).ID },
		func(r any) []byte { return r.(*ClusterCA).KeySealed },
		func(r any, v []byte) any { c := *r.(*ClusterCA); c.KeySealed = v; return &c }},
	SealedLibraryLicense: {tableLibrary, func(r any) string { return r.(*LibraryEntry).ID },
		func(r any) []byte { return r.(*LibraryEntry).LicenseSealed },
		func(r any, v []byte) any { c := *r.(*LibraryEntry); c.LicenseSealed = v; return &c }},
	SealedReplay: {tableIdempotency, func(r any) string { return r.(*Idempotency).ID },
		func(r any) []byte { return r.(*Idempotency).Body },
		func(r any, v []byte) any { c := *r.(*Idempotency); c.Body = v; return &c }},
	SealedWebhookSecret: {tableWebhooks, func(r any) string { return r.(*Webhook).WorkspaceID },
		func(r any) []byte { return r.(*Webhook).SealedSecret },
		func(r any, v []byte) any { c := *r.(*Webhook); c.SealedSecret = v; return &c }},
	SealedGitToken: {tableRepos, func(r any) string { return r.(*Repository).ID },
		func(r any) []byte { return r.(*Repository).TokenSealed },
		func(r any, v []byte) any { c := *r.(*Repository); c.TokenSealed = v; return &c }},
	SealedGitDeployKey: {tableRepos, func(r any) string { return r.(*Repository).ID },
		func(r any) []byte { return r.(*Repository).DeployKeySealed },
		func(r any, v []byte) any { c := *r.(*Repository); c.DeployKeySealed = v; return &c }},
	SealedGitWebhook: {tableRepos, func(r any) string { return r.(*Repository).ID },
		func(r any) []byte { return r.(*Repository).WebhookSecretSealed },
		func(r any, v []byte) any { c := *r.(*Repository); c.WebhookSecretSealed = v; return &c }},
	SealedCertData: {tableCertData, func(r any) string { return r.(*CertData).Key },
		func(r any) []byte { return r.(*CertData).Value },
		func(r any, v []byte) any { c := *r.(*CertData); c.Value = v; return &c }},
}

// SealedValues lists every sealed value in the state, as of one moment.
// Empty fields (a repository without a token) are no value.
func (s *Store) SealedValues() ([]SealedValue, error) {
	return sealedValues(s.read())
}

func sealedValues(tx *memdb.Txn) ([]SealedValue, error) {
	var out []SealedValue
	for _, kind := range SealedKinds {
		f := sealedFields[kind]
		it, err := tx.Get(f.table, "id")
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", f.table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if v := f.get(raw); len(v) > 0 {
				out = append(out, SealedValue{Kind: kind, ID: f.id(raw), Sealed: v})
			}
		}
	}
	return out, nil
}

// ResealValues puts each value's New in place of its Old, only where the
// field still holds Old (compare-and-swap): a value that changed or went
// away meanwhile is left for the rotation's next pass. Nothing else of a
// row changes (not even its updatedAt: the secret is the same). It
// returns how many values it replaced.
func (t *Tx) ResealValues(rs []Reseal) (int, error) {
	n := 0
	err := t.run(func(tx *memdb.Txn) error {
		for _, r := range rs {
			f, ok := sealedFields[r.Kind]
			if !ok {
				return fmt.Errorf("%w: no sealed values of kind %q", ErrInvalid, r.Kind)
			}
			if len(r.Old) == 0 || len(r.New) == 0 {
				return fmt.Errorf("%w: a resealed %s value needs its old and new ciphertexts", ErrInvalid, r.Kind)
			}
			raw, err := tx.First(f.table, "id", r.ID)
			if err != nil {
				return fmt.Errorf("lookup %s: %w", f.table, err)
			}
			if raw == nil || !bytes.Equal(f.get(raw), r.Old) {
				continue
			}
			if err := insert(tx, f.table, f.with(raw, r.New)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
