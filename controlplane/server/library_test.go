package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// TestLibraryZipSurvivesLeaderLoss uploads to the leader of three servers,
// kills it right after the upload is acknowledged and reads the ZIP back
// from every survivor; the new leader serves the entry.
func TestLibraryZipSurvivesLeaderLoss(t *testing.T) {
	servers, _ := st.Cluster(t, 3, st.Options{})
	leader := st.Leader(t, servers)
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	agentCreds := st.Member(t, leader, pki.RoleAgent, "node-x")
	zip := wpzip.BuildPlugin("replicated", "Replicated", "1", "")
	body, ct := st.Multipart(nil, "file", "r.zip", zip)
	e := alice.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct).Must(t, 201)
	sum := sha256.Sum256(zip)
	sha := hex.EncodeToString(sum[:])

	var survivors []*server.Server
	for _, s := range servers {
		if s != leader {
			survivors = append(survivors, s)
		}
	}
	// The upload was acknowledged only once a follower held the ZIP: the
	// leader can go at once.
	leader.Kill()
	next := st.Leader(t, survivors)
	st.WaitFor(t, 30*time.Second, "the ZIP on every survivor", func() bool {
		for _, s := range survivors {
			if s.BlobSync().Once(context.Background()) != 0 || !s.BlobSync().Store.Has(context.Background(), sha) {
				return false
			}
		}
		return true
	})
	for _, s := range survivors {
		// Servers read blobs from one another on the cluster port, with
		// their certificates.
		peer := st.PeerClient(t, s, survivors[0].Creds())
		if r := peer.Do("GET", "/internal/blobs/"+sha, nil).Must(t, 200); !bytes.Equal(r.Raw, zip) {
			t.Fatalf("%s serves other bytes", s.URL())
		}
		// Not on the API port, whatever the token; not to an agent.
		for _, tok := range []string{alice.Token, s.OperatorToken()} {
			if r := st.NewClient(t, s.URL(), tok).Do("GET", "/internal/blobs/"+sha, nil); r.Status != 404 {
				t.Fatalf("a blob on the API port: %d", r.Status)
			}
		}
		if r := st.PeerClient(t, s, agentCreds).Do("GET", "/internal/blobs/"+sha, nil); r.Status != 403 {
			t.Fatalf("an agent read a blob: %d %s", r.Status, r.Raw)
		}
	}
	st.NewClient(t, next.URL(), alice.Token).Do("GET", "/api/app/plugin-library/"+e.Str("plugin.id"), nil).Must(t, 200)
	// A peer only stores what hashes to the name it is sent under.
	op := st.PeerClient(t, next, survivors[0].Creds())
	if r := op.Do("PUT", "/internal/blobs/"+strings.Repeat("ab", 32), []byte("not that"), "Content-Type", "application/octet-stream"); r.Status != 400 {
		t.Fatalf("mismatched blob stored: %d %s", r.Status, r.Raw)
	}
}
