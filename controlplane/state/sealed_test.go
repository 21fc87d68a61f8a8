package state

import (
	"errors"
	"testing"
)

// TestResealValues: every kind is found and replaced in place, only
// while it still holds the ciphertext the rotation read; nothing else of
// the row changes.
func TestResealValues(t *testing.T) {
	s := seed(t)
	must(t, s.Update(func(tx *Tx) error {
		if err := tx.PutClusterCA(ClusterCA{ID: "ca", CertPEM: []byte("cert"), KeySealed: []byte("ca-1"), CreatedAt: t0},
			ClusterMember{ID: "server/s1", Role: "server", Name: "s1"}, OperatorToken{}); err != nil {
			return err
		}
		if err := tx.PutLibraryEntry(LibraryEntry{ID: "lib_1", WorkspaceID: "ws_a", Slug: "x", BlobSHA256: "sha", LicenseSealed: []byte("lic-1"), CreatedAt: t0}, false, Quota{}); err != nil {
			return err
		}
		if err := tx.PutIdempotency(Idempotency{Scope: "usr_a", Key: "k", Fingerprint: "f", Body: []byte("body-1"), CreatedAt: t0}); err != nil {
			return err
		}
		if err := tx.PutWebhook(Webhook{WorkspaceID: "ws_a", URL: "https://x", SealedSecret: []byte("hook-1"), CreatedAt: t0}, false); err != nil {
			return err
		}
		// A repository needs a site; the row alone will do here.
		if err := insert(tx.tx, tableRepos, &Repository{ID: "repo_1", SiteID: "site_1", WorkspaceID: "ws_a", AuthKind: "ssh",
			DeployKeySealed: []byte("dk-1"), WebhookSecretSealed: []byte("wh-1"), CreatedAt: t0}); err != nil {
			return err
		}
		return tx.PutCertData(CertData{Key: "certs/a", Value: []byte("cert-1"), Size: 6, Modified: t0})
	}))
	vals, err := s.SealedValues()
	must(t, err)
	got := map[string]string{}
	for _, v := range vals {
		got[v.Kind+" "+v.ID] = string(v.Sealed)
	}
	want := map[string]string{"cluster-ca ca": "ca-1", "library-license lib_1": "lic-1", "idempotent-replay usr_a\x00k": "body-1",
		"webhook-secret ws_a": "hook-1", "edge-certificate certs/a": "cert-1",
		"git-deploy-key repo_1": "dk-1", "git-webhook-secret repo_1": "wh-1"} // no token: no git-token value
	if len(got) != len(want) {
		t.Fatalf("SealedValues = %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("SealedValues[%q] = %q, want %q", k, got[k], v)
		}
	}

	tests := []struct {
		name string
		rs   []Reseal
		n    int
		err  error
	}{
		{"all current", []Reseal{
			{Kind: SealedClusterCA, ID: "ca", Old: []byte("ca-1"), New: []byte("ca-2")},
			{Kind: SealedLibraryLicense, ID: "lib_1", Old: []byte("lic-1"), New: []byte("lic-2")},
			{Kind: SealedReplay, ID: IdempotencyID("usr_a", "k"), Old: []byte("body-1"), New: []byte("body-2")},
			{Kind: SealedWebhookSecret, ID: "ws_a", Old: []byte("hook-1"), New: []byte("hook-2")},
			{Kind: SealedCertData, ID: "certs/a", Old: []byte("cert-1"), New: []byte("cert-2")},
			{Kind: SealedGitDeployKey, ID: "repo_1", Old: []byte("dk-1"), New: []byte("dk-2")},
			{Kind: SealedGitWebhook, ID: "repo_1", Old: []byte("wh-1"), New: []byte("wh-2")},
		}, 7, nil},
		{"changed meanwhile, or gone", []Reseal{
			{Kind: SealedLibraryLicense, ID: "lib_1", Old: []byte("lic-1"), New: []byte("lic-3")},
			{Kind: SealedCertData, ID: "certs/gone", Old: []byte("x"), New: []byte("y")},
			{Kind: SealedWebhookSecret, ID: "ws_a", Old: []byte("hook-2"), New: []byte("hook-3")},
		}, 1, nil},
		{"unknown kind", []Reseal{{Kind: "nope", ID: "x", Old: []byte("a"), New: []byte("b")}}, 0, ErrInvalid},
		{"empty ciphertext", []Reseal{{Kind: SealedClusterCA, ID: "ca", Old: []byte("ca-2")}}, 0, ErrInvalid},
	}
	for _, tt := range tests {
		var n int
		err := s.Update(func(tx *Tx) (err error) { n, err = tx.ResealValues(tt.rs); return err })
		if n != tt.n || !errors.Is(err, tt.err) {
			t.Errorf("%s: ResealValues = %d, %v; want %d, %v", tt.name, n, err, tt.n, tt.err)
		}
	}
	ca, _ := s.ClusterCA()
	e, _ := s.LibraryEntry("ws_a", "lib_1")
	w, _ := s.Webhook("ws_a")
	d, _ := s.CertData("certs/a")
	r, _ := s.Repository("repo_1")
	if string(r.DeployKeySealed) != "dk-2" || string(r.WebhookSecretSealed) != "wh-2" || r.TokenSealed != nil || r.AuthKind != "ssh" {
		t.Fatalf("repository after: %+v", r)
	}
	if string(ca.KeySealed) != "ca-2" || string(ca.CertPEM) != "cert" || string(e.LicenseSealed) != "lic-2" || e.Slug != "x" ||
		string(w.SealedSecret) != "hook-3" || !w.UpdatedAt.IsZero() || string(d.Value) != "cert-2" || d.Size != 6 {
		t.Fatalf("after: ca %q, license %q, hook %q (updated %v), cert %q", ca.KeySealed, e.LicenseSealed, w.SealedSecret, w.UpdatedAt, d.Value)
	}
}
