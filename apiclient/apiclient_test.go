package apiclient_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/apiclient"
)

// TestAnswerIsBounded: an answer that inflates past the bound (a gzip
// bomb, which Go's transport inflates on its own) is refused once the
// bound is read, not inflated to its end; one within it is read whole.
func TestAnswerIsBounded(t *testing.T) {
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	for range 256 {
		_, _ = zw.Write(chunk)
	}
	_ = zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/small" {
			_, _ = w.Write([]byte(`{"ok": true}`))
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(bomb.Bytes())
	}))
	defer srv.Close()
	c := apiclient.New(srv.URL, "")
	c.MaxAnswerBytes = 1 << 20
	for _, tc := range []struct {
		path, err string
	}{{"/bomb", "larger than 1048576 bytes"}, {"/small", ""}} {
		r, err := c.Do(context.Background(), "GET", tc.path, nil)
		switch {
		case tc.err == "" && (err != nil || r.Body["ok"] != true):
			t.Fatalf("%s: %v %v", tc.path, r, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Fatalf("%s (%d KiB inflating to 256 MiB): %v", tc.path, bomb.Len()>>10, err)
		}
	}
}
