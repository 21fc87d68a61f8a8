package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestRetriesWhatIsSafeToRepeat: while the control plane cannot answer
// (503, as during a leader election), a read or a create that carries an
// Idempotency-Key is sent again with the same key until an answer
// settles it, and a person is told once why the command waits; a write
// without a key is never sent twice; a request that stays unanswered
// gives up within SANDBOXCTL_RETRY with the API's error (exit 1), and
// SANDBOXCTL_RETRY=0 never retries.
func TestRetriesWhatIsSafeToRepeat(t *testing.T) {

	for _, tc := range []struct {
		name     string
		retry    string // SANDBOXCTL_RETRY
		args     []string
		method   string
		fails    int    // how many 503s come before the answer
		code     string // the 503's error code
		wantSent int
		wantExit int
	}{
		{"create after outcome_unknown", "3s", []string{"sites", "create", "--name", "x", "--json"}, "POST", 1, "outcome_unknown", 2, 0},
		{"create during an election", "3s", []string{"sites", "create", "--name", "x", "--json"}, "POST", 2, "service_unavailable", 3, 0},
		{"read during an election", "3s", []string{"sites", "get", "site_1", "--json"}, "GET", 2, "service_unavailable", 3, 0},
		{"delete is not repeated", "3s", []string{"sites", "delete", "site_1"}, "DELETE", 1, "service_unavailable", 1, 1},
		{"an election that does not end", "3s", []string{"sites", "get", "site_1", "--json"}, "GET", 1000, "service_unavailable", -1, 1},
		{"token create after outcome_unknown", "3s", []string{"tokens", "create", "--name", "ci", "--json"}, "POST", 1, "outcome_unknown", 2, 0},
		{"site reset after outcome_unknown", "3s", []string{"sites", "reset", "site_1", "--json"}, "POST", 1, "outcome_unknown", 2, 0},
		{"retries turned off", "0", []string{"sites", "create", "--name", "x", "--json"}, "POST", 1, "outcome_unknown", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var keys []string
			sent := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != tc.method {
					http.Error(w, "unexpected", http.StatusTeapot)
					return
				}
				mu.Lock()
				sent++
				n := sent
				keys = append(keys, r.Header.Get("Idempotency-Key"))
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				if n <= tc.fails {
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(http.StatusServiceUnavailable)
					fmt.Fprintf(w, `{"error":{"code":%q,"message":"retry","details":{}}}`, tc.code)
					return
				}
				status := http.StatusOK
				if tc.method == "POST" {
					status = http.StatusCreated
				}
				w.WriteHeader(status)
				fmt.Fprint(w, `{"site":{"id":"site_1","name":"x","status":"ready"},"deleted":true}`)
			}))
			t.Cleanup(srv.Close)
			t.Setenv("SANDBOXCTL_CONFIG", t.TempDir()+"/config.json")
			t.Setenv("SANDBOX_URL", srv.URL)
			t.Setenv("SANDBOX_TOKEN", "sbx_fake")
			t.Setenv("SANDBOXCTL_RETRY", tc.retry)

			code, out, errs := ctl(t, "", tc.args...)
			mu.Lock()
			defer mu.Unlock()
			if code != tc.wantExit {
				t.Fatalf("exit %d, want %d (sent %d times)\n%s%s", code, tc.wantExit, sent, out, errs)
			}
			if tc.wantSent >= 0 && sent != tc.wantSent {
				t.Fatalf("sent %d times, want %d", sent, tc.wantSent)
			}
			if tc.wantSent < 0 && (sent < 2 || !strings.Contains(errs, "sandboxctl: "+tc.code+": retry\n")) {
				t.Fatalf("sent %d times, stderr %q: want retries, then the API's error", sent, errs)
			}
			// A person is told once why it waits, and only when it does.
			if notices := strings.Count(errs, "retrying for up to"); (sent > 1) != (notices == 1) || notices > 1 {
				t.Fatalf("sent %d times, stderr %q: want one notice exactly when retrying", sent, errs)
			}
			if tc.method == "POST" {
				for _, k := range keys {
					if k == "" || k != keys[0] {
						t.Fatalf("keys %q: every sending must carry the first one's key", keys)
					}
				}
			}
		})
	}
}

// TestRetrySettingRefused: a SANDBOXCTL_RETRY that is not a duration is
// a usage error, before anything is sent; with no server there, a read
// is retried within the setting, then reported (exit 1).
func TestRetrySettingRefused(t *testing.T) {
	t.Setenv("SANDBOXCTL_CONFIG", t.TempDir()+"/config.json")
	t.Setenv("SANDBOX_URL", "http://127.0.0.1:1")
	t.Setenv("SANDBOX_TOKEN", "sbx_fake")
	for _, v := range []string{"ten", "-1s"} {
		t.Setenv("SANDBOXCTL_RETRY", v)
		if code, _, errs := ctl(t, "", "sites", "list"); code != 2 || !strings.Contains(errs, "SANDBOXCTL_RETRY") {
			t.Fatalf("SANDBOXCTL_RETRY=%s: exit %d, %q", v, code, errs)
		}
	}
	t.Setenv("SANDBOXCTL_RETRY", "1s")
	if code, _, errs := ctl(t, "", "sites", "list"); code != 1 || !strings.Contains(errs, "no answer") || !strings.Contains(errs, "connection refused") {
		t.Fatalf("no server: exit %d, %q", code, errs)
	}
}

// TestUncertainWriteStaysUncertain: a create answered outcome_unknown,
// then only "nothing was written" until sandboxctl gives up, ends in the
// uncertain answer (a later refusal speaks only for itself), with the
// key to run it again with; run again with SANDBOXCTL_IDEMPOTENCY_KEY,
// the command sends that key and learns the outcome.
func TestUncertainWriteStaysUncertain(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	applied := "" // the key the fake applied the create under
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		keys = append(keys, key)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case applied == "": // applied, but the answer is lost
			applied = key
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"outcome_unknown","message":"the leader stopped answering","details":{}}}`)
		case key == applied && len(keys) > 4: // the election is over: the replay
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"site":{"id":"site_1","name":"x","status":"creating"},"jobId":"job_1"}`)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"service_unavailable","message":"nothing was written","details":{}}}`)
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("SANDBOXCTL_CONFIG", t.TempDir()+"/config.json")
	t.Setenv("SANDBOX_URL", srv.URL)
	t.Setenv("SANDBOX_TOKEN", "sbx_fake")
	t.Setenv("SANDBOXCTL_RETRY", "1s")

	code, out, errs := ctl(t, "", "sites", "create", "--name", "x", "--json")
	mu.Lock()
	first := keys[0]
	mu.Unlock()
	if code != 1 || out != "" || !strings.Contains(errs, "sandboxctl: outcome_unknown:") || strings.Contains(errs, "nothing was written") ||
		!strings.Contains(errs, "SANDBOXCTL_IDEMPOTENCY_KEY="+first+"\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q: want the uncertain answer and the key %s", code, out, errs, first)
	}

	t.Setenv("SANDBOXCTL_IDEMPOTENCY_KEY", first)
	t.Setenv("SANDBOXCTL_RETRY", "10s")
	code, out, errs = ctl(t, "", "sites", "create", "--name", "x", "--json")
	if code != 0 || !strings.Contains(out, `"site_1"`) {
		t.Fatalf("run again with the key: exit %d, %q %q", code, out, errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if last := keys[len(keys)-1]; last != first {
		t.Fatalf("the second run sent key %q, want %q", last, first)
	}
}
