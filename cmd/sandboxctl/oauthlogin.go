package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"golang.org/x/oauth2"

	"github.com/sandboxd/sandboxd/apiclient"
	"github.com/sandboxd/sandboxd/internal/logincode"
)

// browserLogin is the OAuth connector flow of a native client (RFC 8252):
// register a public client whose only redirect URI is a listener on this
// machine's loopback address, send the person to the consent page with
// an S256 PKCE challenge, take the code the browser brings back and
// exchange it with the verifier. The token has the account scope, so it
// works as a personal token; it is listed (and revocable) with the
// account's tokens under the client's name.
type browserLogin struct {
	server    string
	out       io.Writer // where the URL and progress go (stderr)
	open      func(string) bool
	timeout   time.Duration
	clientTag string // the client's name on the consent page and in the token list
}

// loginPage is what the browser shows once the code has reached us.
var loginPage = template.Must(template.New("done").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>sandboxctl</title></head>
<body style="font-family:sans-serif;margin:4em auto;max-width:32em">
<h1 id="result">{{if .Err}}Login failed{{else}}Logged in{{end}}</h1>
<p>{{if .Err}}{{.Err}}{{else}}sandboxctl has its token. You can close this tab and go back to the terminal.{{end}}</p>
</body></html>`))

// run does the flow and returns the access token.
func (b *browserLogin) run(ctx context.Context) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen for the browser on the loopback address: %w", err)
	}
	defer ln.Close()
	redirect := fmt.Sprintf("http://%s/callback", ln.Addr())

	anon := apiclient.New(b.server, "")
	reg, err := call(anon, "POST", "/api/connect/register", map[string]any{
		"client_name": b.clientTag, "redirect_uris": []string{redirect}, "scope": "account",
		"token_endpoint_auth_method": "none", "software_id": "sandboxctl", "software_version": version,
	})
	if err != nil {
		return "", fmt.Errorf("register this login with %s: %w", b.server, err)
	}
	cfg := &oauth2.Config{ClientID: reg.Str("client_id"), RedirectURL: redirect, Scopes: []string{"account"},
		Endpoint: oauth2.Endpoint{AuthURL: anon.Base + "/connect/authorize", TokenURL: anon.Base + "/api/connect/token",
			AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	state := randomState()
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier))

	type result struct {
		code string
		err  error
	}
	got := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var res result
		switch {
		case q.Get("state") != state:
			// Not our request (another tab, a stale link): refuse it and
			// keep waiting for the real one.
			w.WriteHeader(http.StatusBadRequest)
			_ = loginPage.Execute(w, map[string]any{"Err": "This answer does not belong to the login in progress."})
			return
		case q.Get("error") != "":
			res.err = fmt.Errorf("the browser came back with %s: %s", q.Get("error"), q.Get("error_description"))
		case q.Get("code") == "":
			res.err = errors.New("the browser came back without a code")
		default:
			res.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Connection", "close")
		errText := ""
		if res.err != nil {
			errText = res.err.Error()
		}
		_ = loginPage.Execute(w, map[string]any{"Err": errText})
		// The page is on its way before the login goes on and, when it
		// ends, stops this listener.
		_ = http.NewResponseController(w).Flush()
		select {
		case got <- res:
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	// Shutdown lets the handler finish its page; a connection the browser
	// opened and never used would hold it 5 s, so it is cut after one.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}()

	fmt.Fprintf(b.out, "To log in, open this page in a browser on this computer:\n\n  %s\n\n", authURL)
	fmt.Fprintf(b.out, "Approve there only if the page shows this login code: %s\n", logincode.Of(oauth2.S256ChallengeFromVerifier(verifier)))
	if b.open != nil && b.open(authURL) {
		fmt.Fprintln(b.out, "(opened in your browser)")
	}
	fmt.Fprintln(b.out, "Waiting for the browser…")

	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	var res result
	select {
	case res = <-got:
	case <-ctx.Done():
		return "", fmt.Errorf("no answer from the browser within %s (run login again, or use --with-token)", b.timeout)
	}
	if res.err != nil {
		return "", res.err
	}
	tok, err := cfg.Exchange(ctx, res.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return "", fmt.Errorf("exchange the code for a token: %w", err)
	}
	return tok.AccessToken, nil
}

// randomState is the flow's state parameter: unguessable, so a page
// cannot feed us a code of its own choosing.
func randomState() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// clientTag names this login for the consent page and the token list.
func clientTag() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "this computer"
	}
	return "sandboxctl on " + host
}
