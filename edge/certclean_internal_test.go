package edge

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// TestExpiredCertificatesAreCleaned: the storage cleaning removes a
// certificate (with its key and metadata) that expired more than the
// grace period ago and keeps one still valid or lately expired, and a
// second cleaning within the period does nothing.
func TestExpiredCertificatesAreCleaned(t *testing.T) {
	ctx := context.Background()
	storage := &certmagic.FileStorage{Path: t.TempDir()}
	put := func(name string, notAfter time.Time) string {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
			NotBefore: notAfter.Add(-90 * 24 * time.Hour), NotAfter: notAfter}
		der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		base := "certificates/ca.example-directory/" + name + "/" + name
		for ext, data := range map[string][]byte{
			".crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ".key": []byte("k"), ".json": []byte("{}")} {
			if err := storage.Store(ctx, base+ext, data); err != nil {
				t.Fatal(err)
			}
		}
		return base
	}
	gone := put("gone.example.com", time.Now().Add(-certExpiredGrace-time.Hour))
	lately := put("lately.example.com", time.Now().Add(-time.Hour))
	valid := put("valid.example.com", time.Now().Add(30*24*time.Hour))
	if err := cleanCerts(ctx, storage, "edge-1", zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".crt", ".key", ".json"} {
		if storage.Exists(ctx, gone+ext) {
			t.Errorf("%s%s outlived its expiry", gone, ext)
		}
		if !storage.Exists(ctx, lately+ext) || !storage.Exists(ctx, valid+ext) {
			t.Errorf("a certificate within its grace period lost its %s", ext)
		}
	}
	// Within the period, nothing is cleaned again.
	again := put("again.example.com", time.Now().Add(-certExpiredGrace-time.Hour))
	if err := cleanCerts(ctx, storage, "edge-2", zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if !storage.Exists(ctx, again+".crt") {
		t.Error("the storage was cleaned twice within its period")
	}
}
