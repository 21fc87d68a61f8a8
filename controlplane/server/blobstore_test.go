package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/objstore"
	"github.com/sandboxd/sandboxd/internal/objstore/objstoretest"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// TestSharedBlobStore: three servers keep their blobs in one bucket of a
// real S3-compatible server. A Library ZIP uploaded through the leader is
// an object in the bucket (as the S3 server's own disk shows), and once
// that leader is gone the others serve it with no copy between servers;
// the collector deletes an unreferenced blob from the bucket, and
// deleting the entry deletes its ZIP there.
func TestSharedBlobStore(t *testing.T) {
	store, s3Dir := objstoretest.Start(t)
	store.Bucket = "sandboxd-blobs"
	bucket := blobs.S3Config{Config: store, Prefix: "cluster/blobs"}
	object := func(sha string) string { return filepath.Join(s3Dir, store.Bucket, "cluster", "blobs", sha) }
	var logs st.LogBuffer
	servers, cfgs := st.Cluster(t, 3, st.Options{Logs: &logs, Configure: func(c *server.Config) { c.BlobStore = bucket }})
	leader := st.Leader(t, servers)
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	zip := wpzip.BuildPlugin("shared", "Shared", "1", "")
	body, ct := st.Multipart(nil, "file", "shared.zip", zip)
	e := alice.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct).Must(t, 201)
	sum := sha256.Sum256(zip)
	sha := hex.EncodeToString(sum[:])
	if got, err := os.ReadFile(object(sha)); err != nil || !bytes.Equal(got, zip) {
		t.Fatalf("the ZIP is not in the bucket: %v", err)
	}

	var survivors []*server.Server
	for _, s := range servers {
		if s != leader {
			survivors = append(survivors, s)
		}
	}
	leader.Kill()
	next := st.Leader(t, survivors)
	for _, s := range survivors {
		if missing := s.BlobSync().Once(context.Background()); missing != 0 {
			t.Fatalf("a shared store has %d blobs to fetch", missing)
		}
		op := st.PeerClient(t, s, s.Creds())
		if r := op.Do("GET", "/internal/blobs/"+sha, nil).Must(t, 200); !bytes.Equal(r.Raw, zip) {
			t.Fatalf("%s serves other bytes", s.URL())
		}
	}
	for _, c := range cfgs {
		if _, err := os.Stat(filepath.Join(c.DataDir, "blobs")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s keeps a blob directory with a shared store: %v", c.NodeID, err)
		}
	}
	user := st.NewClient(t, next.URL(), alice.Token)
	user.Do("GET", "/api/app/plugin-library/"+e.Str("plugin.id"), nil).Must(t, 200)

	// An object under the blob's name that nothing names (a crashed
	// upload's), and one that is no blob, put there on the S3 side.
	raw, err := objstore.New(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	orphan := []byte("nobody's ZIP")
	orphanSum := sha256.Sum256(orphan)
	orphanSHA := hex.EncodeToString(orphanSum[:])
	for key, data := range map[string][]byte{"cluster/blobs/" + orphanSHA: orphan, "cluster/blobs/README": []byte("not a blob")} {
		if err := raw.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := next.BlobSync().CollectOnce(context.Background(), time.Hour); err != nil || n != 0 {
		t.Fatalf("collected within the grace: %d, %v", n, err)
	}
	if n, err := next.BlobSync().CollectOnce(context.Background(), -time.Minute); err != nil || n != 1 {
		t.Fatalf("CollectOnce = %d, %v; want the orphan", n, err)
	}
	if _, err := os.Stat(object(orphanSHA)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the orphan is still in the bucket: %v", err)
	}
	for _, p := range []string{object(sha), filepath.Join(s3Dir, store.Bucket, "cluster", "blobs", "README")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("collection took %s: %v", p, err)
		}
	}

	// Deleting the entry drops its ZIP from the bucket.
	user.Do("DELETE", "/api/app/plugin-library/"+e.Str("plugin.id"), nil).Must(t, 200)
	st.WaitFor(t, 10*time.Second, "the ZIP to leave the bucket", func() bool {
		_, err := os.Stat(object(sha))
		return errors.Is(err, os.ErrNotExist)
	})
	if strings.Contains(logs.String(), store.SecretKey) {
		t.Fatal("the blob store's secret key is in the logs")
	}
}

// TestBlobStoreStartupErrors: a server whose bucket cannot be reached, or
// refuses its keys, does not start, and says which.
func TestBlobStoreStartupErrors(t *testing.T) {
	store, _ := objstoretest.Start(t)
	store.Bucket = "sandboxd-blobs"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		name string
		edit func(c *objstore.Config)
		want string
	}{
		{"unreachable", func(c *objstore.Config) { c.Endpoint = dead }, "blob store: blobs: s3://sandboxd-blobs at " + dead + " cannot be used"},
		{"wrong secret", func(c *objstore.Config) { c.SecretKey = "wrong-secret" }, "refused the access key or secret key"},
		{"unknown key", func(c *objstore.Config) { c.AccessKey = "nobody" }, "refused the access key or secret key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := server.DefaultConfig()
			cfg.DataDir, cfg.APIAddr, cfg.NoSyncForTests, cfg.FastRaftForTests = t.TempDir(), "127.0.0.1:0", true, true
			cfg.BlobStore = blobs.S3Config{Config: store}
			tc.edit(&cfg.BlobStore.Config)
			s, err := server.New(cfg)
			if err == nil {
				s.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "wrong-secret") || strings.Contains(err.Error(), store.SecretKey) {
				t.Fatalf("a secret in the error: %v", err)
			}
		})
	}
}
