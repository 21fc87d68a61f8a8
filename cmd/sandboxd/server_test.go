package main

import (
	"strings"
	"testing"
)

// TestBlobStoreConfig: --blob-store takes the bucket from the flag and
// its keys only from the environment; what is missing or wrong is named.
func TestBlobStoreConfig(t *testing.T) {
	keys := map[string]string{"SANDBOXD_BLOB_STORE_ACCESS_KEY": "AKID", "SANDBOXD_BLOB_STORE_SECRET_KEY": "s3cr3t"}
	for _, tc := range []struct {
		name, raw string
		env       map[string]string
		err       string
	}{
		{name: "default", raw: ""},
		{name: "local", raw: "local"},
		{name: "bucket", raw: "s3://blobs/p?endpoint=http://127.0.0.1:7070", env: keys},
		{name: "no keys", raw: "s3://blobs?endpoint=http://127.0.0.1:7070",
			err: "needs its keys in SANDBOXD_BLOB_STORE_ACCESS_KEY and SANDBOXD_BLOB_STORE_SECRET_KEY"},
		{name: "no secret", raw: "s3://blobs?endpoint=http://127.0.0.1:7070", env: map[string]string{"SANDBOXD_BLOB_STORE_ACCESS_KEY": "AKID"},
			err: "SANDBOXD_BLOB_STORE_SECRET_KEY"},
		{name: "bad url", raw: "s3://blobs?endpoint=127.0.0.1:7070", env: keys, err: "endpoint must be http(s)://host[:port]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := blobStoreConfig(tc.raw, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.env == nil && cfg.Endpoint != "" {
				t.Fatalf("local store got %+v", cfg)
			}
			if tc.env != nil && (cfg.AccessKey != "AKID" || cfg.SecretKey != "s3cr3t" || cfg.Prefix != "p" || cfg.Bucket != "blobs") {
				t.Fatalf("bucket config %+v", cfg)
			}
		})
	}
}
