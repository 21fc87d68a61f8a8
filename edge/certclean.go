package edge

import (
	"context"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// How the certificate storage the edges share is kept from filling up:
// certmagic never removes a certificate by itself, so those of custom
// domains disconnected (or sandbox hosts gone) would stay until the
// storage's cap refused new ones. Every edge tries hourly; the storage
// remembers the last cleaning, so the edges together clean it once per
// certCleanEvery, under the storage's lock.
const (
	certCleanTry     = time.Hour
	certCleanEvery   = 24 * time.Hour
	certExpiredGrace = 7 * 24 * time.Hour
)

// cleanCerts removes the certificates (with their keys and metadata)
// that expired more than certExpiredGrace ago, unless the storage was
// cleaned within certCleanEvery.
func cleanCerts(ctx context.Context, storage certmagic.Storage, id string, log *zap.Logger) error {
	return certmagic.CleanStorage(ctx, storage, certmagic.CleanStorageOptions{Logger: log, InstanceID: id,
		Interval: certCleanEvery, ExpiredCerts: true, ExpiredCertGracePeriod: certExpiredGrace})
}

// keepCertsClean runs cleanCerts at start and every certCleanTry until
// ctx ends.
func keepCertsClean(ctx context.Context, storage certmagic.Storage, id string, log *zap.Logger) {
	t := time.NewTicker(certCleanTry)
	defer t.Stop()
	for {
		if err := cleanCerts(ctx, storage, id, log); err != nil && ctx.Err() == nil {
			log.Warn("cleaning the certificate storage", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
