package objstore_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/objstore"
	"github.com/sandboxd/sandboxd/internal/objstore/objstoretest"
)

// TestMultipartAgainstVersityGW: a real S3-compatible server takes a
// multipart upload through presigned part URLs (plain HTTP PUTs, as a
// client sends them), lists and joins its parts, serves the object and
// deletes it; an aborted upload leaves nothing.
func TestMultipartAgainstVersityGW(t *testing.T) {
	cfg, _ := objstoretest.Start(t)
	ctx := context.Background()
	s, err := objstore.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := objstore.New(ctx, cfg); err != nil { // the bucket exists now
		t.Fatalf("second connect: %v", err)
	}
	id, err := s.CreateMultipart(ctx, "imports/imp_x/site.tar")
	if err != nil {
		t.Fatal(err)
	}
	part1 := bytes.Repeat([]byte("a"), 5<<20)
	part2 := []byte("the rest")
	for n, data := range [][]byte{part1, part2} {
		u, err := s.PresignPart(ctx, "imports/imp_x/site.tar", id, n+1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("PUT", u, bytes.NewReader(data))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("ETag") == "" {
			t.Fatalf("part %d: %d %s", n+1, resp.StatusCode, body)
		}
	}
	// A URL for one upload does not let a client write elsewhere.
	u, _ := s.PresignPart(ctx, "imports/imp_x/site.tar", id, 3, time.Minute)
	req, _ := http.NewRequest("PUT", u+"x", bytes.NewReader([]byte("forged")))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		if resp.StatusCode == 200 {
			t.Fatal("a tampered presigned URL was accepted")
		}
		resp.Body.Close()
	}
	parts, err := s.Parts(ctx, "imports/imp_x/site.tar", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[0].Size != int64(len(part1)) || parts[1].Size != int64(len(part2)) {
		t.Fatalf("parts: %+v", parts)
	}
	if err := s.CompleteMultipart(ctx, "imports/imp_x/site.tar", id, parts); err != nil {
		t.Fatal(err)
	}
	rc, size, err := s.Open(ctx, "imports/imp_x/site.tar")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if size != int64(len(part1)+len(part2)) || !bytes.Equal(got, append(append([]byte(nil), part1...), part2...)) {
		t.Fatalf("object: %d bytes", size)
	}
	if err := s.Delete(ctx, "imports/imp_x/site.tar"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Exists(ctx, "imports/imp_x/site.tar"); ok || err != nil {
		t.Fatalf("deleted object: %v %v", ok, err)
	}
	if err := s.Delete(ctx, "imports/imp_x/site.tar"); err != nil {
		t.Fatalf("delete twice: %v", err)
	}

	id2, err := s.CreateMultipart(ctx, "imports/imp_y/db.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AbortMultipart(ctx, "imports/imp_y/db.sql", id2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Parts(ctx, "imports/imp_y/db.sql", id2); err == nil {
		t.Fatal("an aborted upload still lists parts")
	}
}
