package blobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/objstore"
	"github.com/sandboxd/sandboxd/internal/objstore/objstoretest"
)

// contractStore is every method the server uses of a blob store.
type contractStore interface {
	Replica
	Put(ctx context.Context, data []byte) (string, error)
	Adopt(ctx context.Context, path string) (string, int64, error)
	AdoptAs(ctx context.Context, path, sha string) error
	Open(ctx context.Context, sha string) (io.ReadCloser, int64, error)
	Get(ctx context.Context, sha string) ([]byte, error)
	Delete(ctx context.Context, sha string) error
}

var (
	_ contractStore = (*Store)(nil)
	_ contractStore = (*S3Store)(nil)
)

func hexSHA(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// pattern is n bytes that do not repeat at part boundaries.
func pattern(n int, seed byte) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(i*7+i/4093) ^ seed
	}
	return out
}

// implementations opens a fresh, empty store of each kind: the local
// directory, and the bucket of a real VersityGW at its top and under a
// prefix (every call a namespace of its own).
func implementations(t *testing.T) []struct {
	name string
	open func(t *testing.T) contractStore
} {
	cfg, _ := objstoretest.Start(t)
	cfg.Bucket = "blobs-contract"
	n := 0
	s3 := func(top bool) func(t *testing.T) contractStore {
		return func(t *testing.T) contractStore {
			n++
			c := S3Config{Config: cfg}
			if !top {
				c.Prefix = fmt.Sprintf("sandboxd/case-%d", n)
			} else {
				c.Bucket = fmt.Sprintf("blobs-top-%d", n) // a bucket of its own: its top is the namespace
			}
			s, err := OpenS3(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	return []struct {
		name string
		open func(t *testing.T) contractStore
	}{
		{"local", func(t *testing.T) contractStore {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"s3", s3(true)},
		{"s3-prefix", s3(false)},
	}
}

// TestStoreContract runs what callers rely on against the local store
// and a real S3-compatible server: content addressing, streamed puts
// with a bound, adoption of files, not-found errors, sweeping.
func TestStoreContract(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, s contractStore)
	}{
		{"put get open delete", func(t *testing.T, s contractStore) {
			data := []byte("zip bytes")
			sha, err := s.Put(context.Background(), data)
			if err != nil || sha != hexSHA(data) {
				t.Fatalf("Put = %s, %v", sha, err)
			}
			if again, err := s.Put(context.Background(), data); err != nil || again != sha {
				t.Fatalf("same content again: %s, %v", again, err)
			}
			if got, err := s.Get(context.Background(), sha); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get = %q, %v", got, err)
			}
			rc, size, err := s.Open(context.Background(), sha)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if size != int64(len(data)) || !bytes.Equal(got, data) {
				t.Fatalf("Open: %d bytes, %q", size, got)
			}
			if !s.Has(context.Background(), sha) {
				t.Fatal("Has after Put")
			}
			if err := s.Delete(context.Background(), sha); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(context.Background(), sha); err != nil {
				t.Fatalf("delete twice: %v", err)
			}
			if s.Has(context.Background(), sha) {
				t.Fatal("Has after Delete")
			}
			if _, err := s.Get(context.Background(), sha); !errors.Is(err, ErrMissing) {
				t.Fatalf("Get after delete: %v", err)
			}
			if _, _, err := s.Open(context.Background(), sha); !errors.Is(err, ErrMissing) {
				t.Fatalf("Open after delete: %v", err)
			}
			for _, bad := range []string{"../x", "", "ab/cd", strings.Repeat("A", 64), ".put-x"} {
				if _, err := s.Get(context.Background(), bad); err == nil || errors.Is(err, ErrMissing) {
					t.Fatalf("Get(%q) = %v", bad, err)
				}
				if err := s.Delete(context.Background(), bad); err == nil {
					t.Fatalf("Delete(%q) passed", bad)
				}
			}
		}},
		{"put stream", func(t *testing.T, s contractStore) {
			for _, n := range []int{0, 1000, objstore.PartSize - 1, objstore.PartSize, objstore.PartSize + 4321} {
				data := pattern(n, byte(n))
				sha, size, err := s.PutStream(context.Background(), bytes.NewReader(data), int64(n))
				if err != nil || sha != hexSHA(data) || size != int64(n) {
					t.Fatalf("%d bytes: %s %d %v", n, sha, size, err)
				}
				got, err := s.Get(context.Background(), sha)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%d bytes read back: %d, %v", n, len(got), err)
				}
			}
			// Nothing temporary is left behind.
			if n, err := s.Sweep(context.Background(), func(string) bool { return true }, time.Now().Add(48*time.Hour)); err != nil || n != 0 {
				t.Fatalf("leftovers swept: %d, %v", n, err)
			}
		}},
		{"put stream too large", func(t *testing.T, s contractStore) {
			for _, tc := range []struct{ n, max int }{{11, 10}, {objstore.PartSize + 100, objstore.PartSize + 10}, {objstore.PartSize + 1, objstore.PartSize}} {
				data := pattern(tc.n, 3)
				_, _, err := s.PutStream(context.Background(), bytes.NewReader(data), int64(tc.max))
				if !errors.Is(err, ErrTooLarge) {
					t.Fatalf("%d bytes over max %d: %v", tc.n, tc.max, err)
				}
				if s.Has(context.Background(), hexSHA(data)) || s.Has(context.Background(), hexSHA(data[:tc.max])) {
					t.Fatalf("%d bytes: stored although too large", tc.n)
				}
			}
			if n, err := s.Sweep(context.Background(), func(string) bool { return false }, time.Now().Add(48*time.Hour)); err != nil || n != 0 {
				t.Fatalf("refused puts left %d things, %v", n, err)
			}
		}},
		{"put stream reader error", func(t *testing.T, s contractStore) {
			broken := io.MultiReader(bytes.NewReader(pattern(objstore.PartSize+10, 9)), iotestErr{})
			if _, _, err := s.PutStream(context.Background(), broken, 1<<30); err == nil || !strings.Contains(err.Error(), "peer went away") {
				t.Fatalf("broken stream: %v", err)
			}
			if n, err := s.Sweep(context.Background(), func(string) bool { return false }, time.Now().Add(48*time.Hour)); err != nil || n != 0 {
				t.Fatalf("a broken put left %d things, %v", n, err)
			}
		}},
		{"adopt", func(t *testing.T, s contractStore) {
			dir := t.TempDir()
			data := pattern(3<<20, 5)
			path := filepath.Join(dir, "imp_x.part")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			sha, n, err := s.Adopt(context.Background(), path)
			if err != nil || sha != hexSHA(data) || n != int64(len(data)) {
				t.Fatalf("Adopt = %s %d %v", sha, n, err)
			}
			if got, err := s.Get(context.Background(), sha); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("adopted blob: %v", err)
			}
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("the adopted file is its owner's to remove: %v", err)
			}
			other := append([]byte("other "), data...)
			path2 := filepath.Join(dir, "imp_y.part")
			if err := os.WriteFile(path2, other, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := s.AdoptAs(context.Background(), path2, hexSHA(other)); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get(context.Background(), hexSHA(other)); err != nil || !bytes.Equal(got, other) {
				t.Fatalf("AdoptAs blob: %v", err)
			}
			if err := s.AdoptAs(context.Background(), path2, "nope"); err == nil {
				t.Fatal("AdoptAs took a bad name")
			}
			if _, _, err := s.Adopt(context.Background(), filepath.Join(dir, "missing")); err == nil {
				t.Fatal("adopted a missing file")
			}
		}},
		{"sweep", func(t *testing.T, s contractStore) {
			kept, err := s.Put(context.Background(), []byte("kept"))
			if err != nil {
				t.Fatal(err)
			}
			orphan, err := s.Put(context.Background(), []byte("orphan"))
			if err != nil {
				t.Fatal(err)
			}
			keep := func(sha string) bool { return sha == kept }
			// Within the grace nothing goes.
			if n, err := s.Sweep(context.Background(), keep, time.Now().Add(-time.Hour)); err != nil || n != 0 {
				t.Fatalf("young blobs swept: %d, %v", n, err)
			}
			if n, err := s.Sweep(context.Background(), keep, time.Now().Add(time.Minute)); err != nil || n != 1 {
				t.Fatalf("Sweep = %d, %v; want the orphan", n, err)
			}
			if !s.Has(context.Background(), kept) || s.Has(context.Background(), orphan) {
				t.Fatalf("after sweep: kept %v, orphan %v", s.Has(context.Background(), kept), s.Has(context.Background(), orphan))
			}
		}},
	}
	for _, impl := range implementations(t) {
		t.Run(impl.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, impl.open(t)) })
			}
		})
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("peer went away") }

// TestS3StoreBucket checks what the bucket itself holds, as seen by the
// S3 server's own data directory: blobs are objects PREFIX/<sha256>, a
// blob is verified before AdoptAs uploads it, Sweep aborts stale
// unfinished uploads and leaves objects that are not blobs alone.
func TestS3StoreBucket(t *testing.T) {
	cfg, dataDir := objstoretest.Start(t)
	cfg.Bucket = "blobs-bucket"
	s, err := OpenS3(context.Background(), S3Config{Config: cfg, Prefix: "sandboxd/blobs"})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("a Library ZIP")
	sha, err := s.Put(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dataDir, cfg.Bucket, "sandboxd", "blobs", sha)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("object on the S3 server's disk: %q, %v", got, err)
	}

	// AdoptAs checks the caller's hash before anything is uploaded.
	path := filepath.Join(t.TempDir(), "upload.part")
	if err := os.WriteFile(path, []byte("changed on disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	claimed := hexSHA([]byte("what the caller hashed"))
	if err := s.AdoptAs(context.Background(), path, claimed); err == nil || !strings.Contains(err.Error(), "hash to") {
		t.Fatalf("AdoptAs with a wrong hash: %v", err)
	}
	if s.Has(context.Background(), claimed) || s.Has(context.Background(), hexSHA([]byte("changed on disk"))) {
		t.Fatal("AdoptAs with a wrong hash stored something")
	}

	// Another tenant's objects under the prefix, and an unfinished put.
	raw, err := objstore.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Put(context.Background(), "sandboxd/blobs/notes.txt", strings.NewReader("not a blob"), 10); err != nil {
		t.Fatal(err)
	}
	if err := raw.Put(context.Background(), "sandboxd/other", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	id, err := raw.CreateMultipart(context.Background(), "sandboxd/blobs/.put-crashed")
	if err != nil {
		t.Fatal(err)
	}
	// A day's more grace for uploads: a fresh one is left.
	if n, err := s.Sweep(context.Background(), func(string) bool { return true }, time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	if n, err := s.Sweep(context.Background(), func(string) bool { return true }, time.Now().Add(25*time.Hour)); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want the stale upload", n, err)
	}
	if _, err := raw.Parts(context.Background(), "sandboxd/blobs/.put-crashed", id); err == nil {
		t.Fatal("the stale upload is still there")
	}
	if n, err := s.Sweep(context.Background(), func(string) bool { return false }, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want the blob", n, err)
	}
	for _, key := range []string{"sandboxd/blobs/notes.txt", "sandboxd/other"} {
		if ok, err := raw.Exists(context.Background(), key); !ok || err != nil {
			t.Fatalf("%s swept: %v", key, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, cfg.Bucket, "sandboxd", "blobs", sha)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("swept blob still on the S3 server's disk: %v", err)
	}
}

// TestS3PutStreamMemory: a stream several parts long goes up with a
// bounded amount of memory, not the whole stream.
func TestS3PutStreamMemory(t *testing.T) {
	cfg, _ := objstoretest.Start(t)
	cfg.Bucket = "blobs-memory"
	s, err := OpenS3(context.Background(), S3Config{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	const size = 8 * objstore.PartSize // 128 MiB
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(patternReader{}, size), h)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sha, n, err := s.PutStream(context.Background(), src, size)
	runtime.ReadMemStats(&after)
	if err != nil || n != size || sha != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("PutStream = %s %d %v", sha, n, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/2 {
		t.Fatalf("PutStream of %d MiB allocated %d MiB", size>>20, alloc>>20)
	} else {
		t.Logf("PutStream of %d MiB allocated %d MiB", size>>20, alloc>>20)
	}
	rc, got, err := s.Open(context.Background(), sha)
	if err != nil || got != size {
		t.Fatalf("Open: %d %v", got, err)
	}
	rh := sha256.New()
	_, err = io.Copy(rh, rc)
	rc.Close()
	if err != nil || hex.EncodeToString(rh.Sum(nil)) != sha {
		t.Fatalf("read back: %v", err)
	}
}

type patternReader struct{}

func (patternReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i * 31)
	}
	return len(p), nil
}

// TestOpenS3Refused: a store that cannot be reached, or that refuses the
// keys, stops OpenS3 with an error that says which.
func TestOpenS3Refused(t *testing.T) {
	cfg, _ := objstoretest.Start(t)
	cfg.Bucket = "blobs-refused"
	wrong := cfg
	wrong.SecretKey = "not-the-secret"
	unknown := cfg
	unknown.AccessKey = "nobody"
	down := cfg
	down.Endpoint = "http://" + deadAddr(t)
	for _, tc := range []struct {
		name string
		cfg  objstore.Config
		want string
	}{
		{"wrong secret", wrong, "refused the access key or secret key"},
		{"unknown key", unknown, "refused the access key or secret key"},
		{"unreachable", down, "cannot be used"},
		{"no keys", objstore.Config{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket}, "no access key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := OpenS3(ctx, S3Config{Config: tc.cfg})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "s3://blobs-refused") {
				t.Fatalf("OpenS3 = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), cfg.SecretKey) || strings.Contains(err.Error(), "not-the-secret") {
				t.Fatalf("a secret in the error: %v", err)
			}
		})
	}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestParseURL covers the --blob-store values.
func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want S3Config
		err  string
	}{
		{raw: "", want: S3Config{}},
		{raw: "local", want: S3Config{}},
		{raw: "s3://sandboxd-blobs?endpoint=http://127.0.0.1:7070",
			want: S3Config{Config: objstore.Config{Endpoint: "http://127.0.0.1:7070", Bucket: "sandboxd-blobs", Region: "us-east-1"}}},
		{raw: "s3://b.example/prod/blobs/?endpoint=https://s3.example:443/&region=eu-west-1",
			want: S3Config{Config: objstore.Config{Endpoint: "https://s3.example:443", Bucket: "b.example", Region: "eu-west-1"}, Prefix: "prod/blobs"}},
		{raw: "/var/lib/blobs", err: `scheme "" is not s3`},
		{raw: "gs://bucket?endpoint=http://h:1", err: `scheme "gs" is not s3`},
		{raw: "s3://?endpoint=http://h:1", err: "names no bucket"},
		{raw: "s3:bucket", err: "names no bucket"},
		{raw: "s3://Bucket_1?endpoint=http://h:1", err: `bucket "Bucket_1" is not a valid bucket name`},
		{raw: "s3://ab?endpoint=http://h:1", err: `bucket "ab" is not a valid`},
		{raw: "s3://key:secret@bucket?endpoint=http://h:1", err: "holds credentials"},
		{raw: "s3://bucket", err: "no endpoint parameter"},
		{raw: "s3://bucket?endpoint=h:1", err: "endpoint must be http(s)://host[:port]"},
		{raw: "s3://bucket?endpoint=ftp://h:1", err: "endpoint must be http(s)"},
		{raw: "s3://bucket?endpoint=http://k:s@h:1", err: "endpoint holds credentials"},
		{raw: "s3://bucket?endpoint=http://h:1/path", err: "has a path or query"},
		{raw: "s3://bucket?endpoint=http://h:1&enpoint=x", err: `unknown parameter "enpoint"`},
		{raw: "s3://bucket?endpoint=http://h:1&endpoint=http://h:2", err: "given once"},
		{raw: "s3://bucket?endpoint=http://h:1&region=", err: "given once, not empty"},
		{raw: "s3://bucket/a//b?endpoint=http://h:1", err: "empty, '.', '..'"},
		{raw: "s3://bucket/a/../b?endpoint=http://h:1", err: "empty, '.', '..'"},
		{raw: "s3://bucket?endpoint=http://h:1#x", err: "fragment"},
		{raw: "s3://bucket?endpoint=http://h:1;x=%zz", err: "query does not parse"},
		{raw: "s3://bu cket?endpoint=http://h:1", err: "does not parse"},
	} {
		got, err := ParseURL(tc.raw)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseURL(%q) = %+v, %v; want an error with %q", tc.raw, got, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("ParseURL(%q) echoes the secret: %v", tc.raw, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", tc.raw, got, err, tc.want)
		}
	}
}

// TestSyncerShared: with a shared store the Syncer neither fetches nor
// pushes, and collecting sweeps the store.
func TestSyncerShared(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := s.Put(context.Background(), []byte("orphan"))
	kept, _ := s.Put(context.Background(), []byte("kept"))
	asked := 0
	y := &Syncer{Store: s, Shared: true,
		Wanted: func() ([]string, error) { asked++; return []string{kept, strings.Repeat("0", 64)}, nil },
		Peers:  func() []string { t.Fatal("a shared store asked for peers"); return nil }}
	if missing := y.Once(context.Background()); missing != 0 || asked != 0 {
		t.Fatalf("Once = %d, asked %d", missing, asked)
	}
	if err := y.Push(context.Background(), kept, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	y.Run(ctx) // returns at once
	if n, err := y.CollectOnce(context.Background(), -time.Minute); err != nil || n != 1 || s.Has(context.Background(), orphan) || !s.Has(context.Background(), kept) {
		t.Fatalf("CollectOnce = %d, %v", n, err)
	}
}
