// Package objstore is the S3-compatible object store that takes large
// import uploads directly from clients: multipart uploads whose parts a
// client PUTs to presigned URLs, then reads and deletes for the restore.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config says where the store is and how to sign for it.
type Config struct {
	// Endpoint is the store's base URL (http://127.0.0.1:7070); its
	// scheme decides TLS. Presigned URLs point at it, so clients must
	// reach it too.
	Endpoint  string
	Bucket    string
	Region    string
	AccessKey string
	SecretKey string
}

// Store is one bucket.
type Store struct {
	core   minio.Core
	bucket string
}

// Part is an uploaded part of a multipart upload.
type Part struct {
	Number int
	ETag   string
	Size   int64
}

// New connects to the bucket, making it when it is missing.
func New(ctx context.Context, cfg Config) (*Store, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("objstore: endpoint %q must be an http(s) URL", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("objstore: no bucket")
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: u.Scheme == "https", Region: region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("objstore: bucket %s: %w", cfg.Bucket, err)
	}
	if !ok {
		if err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: region}); err != nil {
			return nil, fmt.Errorf("objstore: make bucket %s: %w", cfg.Bucket, err)
		}
	}
	return &Store{core: minio.Core{Client: c}, bucket: cfg.Bucket}, nil
}

// CreateMultipart starts a multipart upload of key.
func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, key, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return "", fmt.Errorf("objstore: start upload of %s: %w", key, err)
	}
	return id, nil
}

// PresignPart is a URL a client PUTs one part to, valid for expiry.
func (s *Store) PresignPart(ctx context.Context, key, uploadID string, part int, expiry time.Duration) (string, error) {
	q := url.Values{"partNumber": {fmt.Sprint(part)}, "uploadId": {uploadID}}
	u, err := s.core.Presign(ctx, "PUT", s.bucket, key, expiry, q)
	if err != nil {
		return "", fmt.Errorf("objstore: presign %s part %d: %w", key, part, err)
	}
	return u.String(), nil
}

// Parts lists the parts uploaded so far, by number.
func (s *Store) Parts(ctx context.Context, key, uploadID string) ([]Part, error) {
	var out []Part
	marker := 0
	for {
		res, err := s.core.ListObjectParts(ctx, s.bucket, key, uploadID, marker, 1000)
		if err != nil {
			return nil, fmt.Errorf("objstore: list parts of %s: %w", key, err)
		}
		for _, p := range res.ObjectParts {
			out = append(out, Part{Number: p.PartNumber, ETag: strings.Trim(p.ETag, `"`), Size: p.Size})
		}
		if !res.IsTruncated || res.NextPartNumberMarker <= marker {
			break
		}
		marker = res.NextPartNumberMarker
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}

// CompleteMultipart joins the parts into the object.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) error {
	cp := make([]minio.CompletePart, 0, len(parts))
	for _, p := range parts {
		cp = append(cp, minio.CompletePart{PartNumber: p.Number, ETag: p.ETag})
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, key, uploadID, cp, minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("objstore: complete %s: %w", key, err)
	}
	return nil
}

// AbortMultipart drops an unfinished upload and its parts.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := s.core.AbortMultipartUpload(ctx, s.bucket, key, uploadID); err != nil && !notFound(err) {
		return fmt.Errorf("objstore: abort %s: %w", key, err)
	}
	return nil
}

// ErrNotFound is an object (or upload) the bucket does not hold, so
// callers can tell a missing object from a store that failed.
var ErrNotFound = errors.New("no such object")

// Open reads an object, with its size; a missing one is ErrNotFound.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	o, err := s.core.Client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("objstore: get %s: %w", key, err)
	}
	st, err := o.Stat()
	if notFound(err) {
		o.Close()
		return nil, 0, fmt.Errorf("objstore: get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		o.Close()
		return nil, 0, fmt.Errorf("objstore: stat %s: %w", key, err)
	}
	return o, st.Size, nil
}

// PartSize is the part a streamed upload holds in memory at a time: an
// upload of unknown length never buffers more than this.
const PartSize = 16 << 20

// Put uploads key from r: size bytes, or up to r's EOF when size is -1,
// in PartSize parts held in memory one at a time (a file, which can be
// read at offsets, is not buffered at all). An error from r aborts the
// upload and leaves nothing.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	_, err := s.core.Client.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream", PartSize: PartSize, NumThreads: 2})
	if err != nil {
		return fmt.Errorf("objstore: put %s: %w", key, err)
	}
	return nil
}

// Copy copies an object to another key of the bucket on the store's
// side (in parts when it is over what one copy request may move); the
// copy is new, so its modification time is now.
func (s *Store) Copy(ctx context.Context, from, to string) error {
	_, err := s.core.Client.ComposeObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: to},
		minio.CopySrcOptions{Bucket: s.bucket, Object: from})
	if notFound(err) {
		return fmt.Errorf("objstore: copy %s to %s: %w", from, to, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("objstore: copy %s to %s: %w", from, to, err)
	}
	return nil
}

// Object is one listed object.
type Object struct {
	Key      string
	Size     int64
	Modified time.Time
}

// List calls fn for every object whose key starts with prefix and has
// no "/" after it (one level, as a directory listing), stopping at fn's
// first error.
func (s *Store) List(ctx context.Context, prefix string, fn func(Object) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the lister when fn stops early
	for o := range s.core.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if o.Err != nil {
			return fmt.Errorf("objstore: list %s: %w", prefix, o.Err)
		}
		if strings.HasSuffix(o.Key, "/") { // a deeper level
			continue
		}
		if err := fn(Object{Key: o.Key, Size: o.Size, Modified: o.LastModified}); err != nil {
			return err
		}
	}
	return nil
}

// Upload is an unfinished multipart upload.
type Upload struct {
	Key       string
	ID        string
	Initiated time.Time
}

// Uploads lists the unfinished multipart uploads of keys under prefix,
// such as those of a writer that crashed mid-upload.
func (s *Store) Uploads(ctx context.Context, prefix string) ([]Upload, error) {
	var out []Upload
	keyMarker, idMarker := "", ""
	for {
		res, err := s.core.ListMultipartUploads(ctx, s.bucket, prefix, keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, fmt.Errorf("objstore: list uploads under %s: %w", prefix, err)
		}
		for _, u := range res.Uploads {
			out = append(out, Upload{Key: u.Key, ID: u.UploadID, Initiated: u.Initiated})
		}
		if !res.IsTruncated || (res.NextKeyMarker == keyMarker && res.NextUploadIDMarker == idMarker) {
			return out, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// Delete removes an object; a missing one is fine.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.core.Client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("objstore: delete %s: %w", key, err)
	}
	return nil
}

// Exists reports whether an object exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	_, err := s.core.Client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if notFound(err) {
		return false, nil
	}
	return err == nil, err
}

func notFound(err error) bool {
	if err == nil {
		return false
	}
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NoSuchUpload" || code == "NotFound"
}

// Refused reports an error that says the store did not accept the
// credentials (unknown key, bad signature, no permission), so callers can
// point at the keys rather than at the network.
func Refused(err error) bool {
	var r minio.ErrorResponse
	if !errors.As(err, &r) {
		return false
	}
	switch r.Code {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidSecurity", "ExpiredToken", "InvalidToken",
		"XAdminUserNotFound": // VersityGW's unknown key
		return true
	}
	return false
}
