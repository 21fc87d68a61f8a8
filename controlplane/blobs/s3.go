package blobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/objstore"
)

// S3Config says which bucket of an S3-compatible store holds the blobs
// when every server shares one store instead of keeping its own copies.
type S3Config struct {
	// Config is the store's endpoint, bucket, region and keys.
	objstore.Config
	// Prefix goes before every blob's name (with "a/b", blob S is the
	// object a/b/S); empty keeps blobs at the top of the bucket.
	Prefix string
}

// bucketRE is S3's rule for bucket names (lower case, 3 to 63
// characters, starting and ending with a letter or digit).
var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// ParseURL reads a --blob-store value, so a bad one stops the server at
// startup with what is wrong: "" or "local" is the zero S3Config (blobs
// in the data directory, copied between servers);
// s3://BUCKET[/PREFIX]?endpoint=http(s)://host:port[&region=R] is a
// bucket. Keys never come in the URL: it shows on command lines.
func ParseURL(raw string) (S3Config, error) {
	if raw == "" || raw == "local" {
		return S3Config{}, nil
	}
	const want = "want local or s3://BUCKET[/PREFIX]?endpoint=http(s)://host:port[&region=REGION]"
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold what it should not
		}
		return S3Config{}, fmt.Errorf("blob store URL does not parse (%v); %s", err, want)
	}
	switch {
	case u.Scheme != "s3":
		return S3Config{}, fmt.Errorf("blob store URL scheme %q is not s3; %s", u.Scheme, want)
	case u.User != nil:
		return S3Config{}, errors.New("blob store URL holds credentials, which would show on command lines: " +
			"set SANDBOXD_BLOB_STORE_ACCESS_KEY and SANDBOXD_BLOB_STORE_SECRET_KEY instead")
	case u.Opaque != "" || u.Host == "":
		return S3Config{}, fmt.Errorf("blob store URL names no bucket; %s", want)
	case !bucketRE.MatchString(u.Host) || strings.Contains(u.Host, ".."):
		return S3Config{}, fmt.Errorf("blob store bucket %q is not a valid bucket name (3 to 63 of a-z, 0-9, '.', '-', "+
			"starting and ending with a letter or digit)", u.Host)
	case u.Fragment != "":
		return S3Config{}, fmt.Errorf("blob store URL has a fragment #%s; %s", u.Fragment, want)
	}
	cfg := S3Config{Config: objstore.Config{Bucket: u.Host, Region: "us-east-1"}}
	if p := strings.Trim(u.Path, "/"); p != "" {
		for _, seg := range strings.Split(p, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".put-") {
				return S3Config{}, fmt.Errorf("blob store prefix %q has an empty, '.', '..' or '.put-' segment", p)
			}
		}
		cfg.Prefix = p
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return S3Config{}, fmt.Errorf("blob store URL query does not parse (%v); %s", err, want)
	}
	for k, v := range q {
		switch {
		case k != "endpoint" && k != "region":
			return S3Config{}, fmt.Errorf("blob store URL has unknown parameter %q (known: endpoint, region)", k)
		case len(v) != 1 || v[0] == "":
			return S3Config{}, fmt.Errorf("blob store URL parameter %s must be given once, not empty", k)
		}
	}
	if r := q.Get("region"); r != "" {
		cfg.Region = r
	}
	ep := q.Get("endpoint")
	if ep == "" {
		return S3Config{}, fmt.Errorf("blob store URL has no endpoint parameter; %s", want)
	}
	e, err := url.Parse(ep)
	switch {
	case err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "":
		return S3Config{}, fmt.Errorf("blob store endpoint must be http(s)://host[:port], not %q", ep)
	case e.User != nil:
		return S3Config{}, errors.New("blob store endpoint holds credentials: set SANDBOXD_BLOB_STORE_ACCESS_KEY and SANDBOXD_BLOB_STORE_SECRET_KEY instead")
	case strings.Trim(e.Path, "/") != "" || e.RawQuery != "":
		return S3Config{}, fmt.Errorf("blob store endpoint %q has a path or query; give only http(s)://host[:port]", ep)
	}
	cfg.Endpoint = e.Scheme + "://" + e.Host
	return cfg, nil
}

// String names the bucket for messages, without keys.
func (c S3Config) String() string {
	s := "s3://" + c.Bucket
	if c.Prefix != "" {
		s += "/" + c.Prefix
	}
	return s + " at " + c.Endpoint
}

// uploadGrace is how much longer than a blob an unfinished upload is
// left before Sweep aborts it.
const uploadGrace = 24 * time.Hour

// opTimeout bounds one metadata request (stat, delete, list page).
const opTimeout = time.Minute

// S3Store keeps blobs as objects of one bucket that every server
// shares: what one server stores, every server reads, so nothing is
// copied between servers (blob S is the object PREFIX/S).
type S3Store struct {
	obj    *objstore.Store
	name   string // for messages
	prefix string // "" or ending in "/"
}

// OpenS3 connects to the bucket, making it when it is missing; a store
// that cannot be reached or that refuses the keys is an error that says
// which.
func OpenS3(ctx context.Context, cfg S3Config) (*S3Store, error) {
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, fmt.Errorf("blobs: %s: no access key or secret key", cfg)
	}
	obj, err := objstore.New(ctx, cfg.Config)
	switch {
	case objstore.Refused(err):
		return nil, fmt.Errorf("blobs: %s refused the access key or secret key (unknown key, wrong secret or no permission): %w", cfg, err)
	case err != nil:
		return nil, fmt.Errorf("blobs: %s cannot be used: %w", cfg, err)
	}
	s := &S3Store{obj: obj, name: cfg.String()}
	if cfg.Prefix != "" {
		s.prefix = cfg.Prefix + "/"
	}
	return s, nil
}

func (s *S3Store) key(sha string) (string, error) {
	if !shaRE.MatchString(sha) {
		return "", fmt.Errorf("blobs: bad name %q", sha)
	}
	return s.prefix + sha, nil
}

// opContext bounds one small operation (a delete, a lookup) within the
// caller's context.
func opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, opTimeout)
}

// Put stores data and returns its SHA-256 (hex). Storing a blob again
// uploads it again, which makes it new to Sweep's grace.
func (s *S3Store) Put(ctx context.Context, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	key, _ := s.key(sha)
	if err := s.obj.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		return "", fmt.Errorf("blobs: put %s: %w", sha, err)
	}
	return sha, nil
}

// bounded reads at most max bytes of r, hashing them; past max it fails
// with ErrTooLarge (which aborts an upload reading it).
type bounded struct {
	r    io.Reader
	max  int64
	n    int64
	hash hash.Hash
}

func (b *bounded) Read(p []byte) (int, error) {
	if b.n > b.max {
		return 0, fmt.Errorf("%w: over %d bytes", ErrTooLarge, b.max)
	}
	if room := b.max + 1 - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	b.hash.Write(p[:n])
	if b.n > b.max {
		return n, fmt.Errorf("%w: over %d bytes", ErrTooLarge, b.max)
	}
	return n, err
}

// PutStream stores what r yields, at most max bytes, and returns its
// SHA-256 (hex) and size; more than max bytes is ErrTooLarge and stores
// nothing. What fits in one part is hashed in memory and uploaded under
// its name; a larger stream is uploaded part by part (one part in memory
// at a time) under a temporary name, since its name is only known at its
// end, then copied under its name by the store.
func (s *S3Store) PutStream(ctx context.Context, r io.Reader, max int64) (string, int64, error) {
	in := &bounded{r: r, max: max, hash: sha256.New()}
	head := make([]byte, min(objstore.PartSize, max+1))
	n, err := io.ReadFull(in, head)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		sha := hex.EncodeToString(in.hash.Sum(nil))
		key, _ := s.key(sha)
		if err := s.obj.Put(ctx, key, bytes.NewReader(head[:n]), int64(n)); err != nil {
			return "", 0, fmt.Errorf("blobs: put %s: %w", sha, err)
		}
		return sha, int64(n), nil
	}
	if err == nil && in.n > max {
		err = fmt.Errorf("%w: over %d bytes", ErrTooLarge, max)
	}
	if err != nil {
		return "", 0, fmt.Errorf("blobs: put stream: %w", err)
	}
	tmp := s.prefix + ".put-" + rand.Text()
	defer func() {
		ctx, cancel := opContext(ctx)
		defer cancel()
		_ = s.obj.Delete(ctx, tmp) // what a crash leaves, Sweep takes
	}()
	if err := s.obj.Put(ctx, tmp, io.MultiReader(bytes.NewReader(head), in), -1); err != nil {
		return "", 0, fmt.Errorf("blobs: put stream: %w", err)
	}
	sha := hex.EncodeToString(in.hash.Sum(nil))
	key, _ := s.key(sha)
	if err := s.obj.Copy(ctx, tmp, key); err != nil {
		return "", 0, fmt.Errorf("blobs: put stream %s: %w", sha, err)
	}
	return sha, in.n, nil
}

// hashFile returns the SHA-256 (hex) and size of the file at path, and
// the file rewound for uploading.
func hashFile(path string) (*os.File, string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", 0, fmt.Errorf("blobs: adopt: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, "", 0, fmt.Errorf("blobs: adopt %s: %w", path, err)
	}
	return f, hex.EncodeToString(h.Sum(nil)), n, nil
}

// Adopt uploads the file at path as a blob, reading it at offsets, never
// whole into memory. The file stays where it is for its owner to remove,
// as with the local store: an owner whose next step fails still holds it.
func (s *S3Store) Adopt(ctx context.Context, path string) (string, int64, error) {
	f, sha, n, err := hashFile(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	key, _ := s.key(sha)
	if err := s.obj.Put(ctx, key, f, n); err != nil {
		return "", 0, fmt.Errorf("blobs: adopt %s: %w", path, err)
	}
	return sha, n, nil
}

// AdoptAs is Adopt for a file whose SHA-256 its caller computed while
// writing it. The bytes are hashed again before anything is uploaded: a
// shared store must never hold other bytes under a blob's name.
func (s *S3Store) AdoptAs(ctx context.Context, path, sha string) error {
	if _, err := s.key(sha); err != nil {
		return err
	}
	f, got, n, err := hashFile(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if got != sha {
		return fmt.Errorf("blobs: adopt %s: its bytes hash to %s, not %s", path, got, sha)
	}
	key, _ := s.key(sha)
	if err := s.obj.Put(ctx, key, f, n); err != nil {
		return fmt.Errorf("blobs: adopt %s: %w", path, err)
	}
	return nil
}

// Open opens a stored blob for reading, with its size; a missing one is
// ErrMissing. It does not check the hash: whoever copies the blob does,
// at the end.
func (s *S3Store) Open(ctx context.Context, sha string) (io.ReadCloser, int64, error) {
	key, err := s.key(sha)
	if err != nil {
		return nil, 0, err
	}
	rc, size, err := s.obj.Open(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrMissing, sha)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("blobs: open %s: %w", sha, err)
	}
	return rc, size, nil
}

// Get reads a blob and checks it still has its hash.
func (s *S3Store) Get(ctx context.Context, sha string) ([]byte, error) {
	rc, size, err := s.Open(ctx, sha)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data := make([]byte, size)
	if _, err := io.ReadFull(rc, data); err != nil {
		return nil, fmt.Errorf("blobs: read %s: %w", sha, err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != sha {
		return nil, fmt.Errorf("blobs: %s is corrupt in the store", sha)
	}
	return data, nil
}

// Delete removes a blob; a missing one is fine.
func (s *S3Store) Delete(ctx context.Context, sha string) error {
	key, err := s.key(sha)
	if err != nil {
		return err
	}
	ctx, cancel := opContext(ctx)
	defer cancel()
	if err := s.obj.Delete(ctx, key); err != nil {
		return fmt.Errorf("blobs: delete %s: %w", sha, err)
	}
	return nil
}

// Has reports whether the bucket holds a blob; a store that does not
// answer holds nothing as far as callers can tell.
func (s *S3Store) Has(ctx context.Context, sha string) bool {
	key, err := s.key(sha)
	if err != nil {
		return false
	}
	ctx, cancel := opContext(ctx)
	defer cancel()
	ok, err := s.obj.Exists(ctx, key)
	return err == nil && ok
}

// Sweep deletes the blobs in the bucket that keep does not want and that
// were last stored before before, the temporary objects of streamed puts
// as old, and the unfinished uploads of either kind a crash left a day
// before that (an upload under way shows no sign of life, and a large
// one takes long); it returns how many went. Objects under the prefix
// with other names (an import store sharing the bucket) are never
// touched.
func (s *S3Store) Sweep(ctx context.Context, keep func(sha string) bool, before time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	ours := func(name string) bool { return shaRE.MatchString(name) || strings.HasPrefix(name, ".put-") }
	removed := 0
	var errs []error
	err := s.obj.List(ctx, s.prefix, func(o objstore.Object) error {
		name := strings.TrimPrefix(o.Key, s.prefix)
		if !ours(name) || (shaRE.MatchString(name) && keep(name)) || !o.Modified.Before(before) {
			return nil
		}
		if err := s.obj.Delete(ctx, o.Key); err != nil {
			errs = append(errs, err)
			return nil
		}
		removed++
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	ups, err := s.obj.Uploads(ctx, s.prefix)
	if err != nil {
		errs = append(errs, err)
	}
	for _, u := range ups {
		name := strings.TrimPrefix(u.Key, s.prefix)
		if strings.Contains(name, "/") || !ours(name) || !u.Initiated.Before(before.Add(-uploadGrace)) {
			continue
		}
		if err := s.obj.AbortMultipart(ctx, u.Key, u.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("blobs: sweep %s: %w", s.name, err)
	}
	return removed, nil
}
