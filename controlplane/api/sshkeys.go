package api

import (
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// SSHKeyView is an account SSH key.
type SSHKeyView struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Type        string     `json:"type" doc:"ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa."`
	Bits        int        `json:"bits"`
	Fingerprint string     `json:"fingerprint" doc:"SHA256:…, as ssh-keygen -l prints it."`
	PublicKey   string     `json:"publicKey" doc:"The key in authorized_keys form, without its comment."`
	CreatedAt   time.Time  `json:"createdAt"`
	LastUsedAt  *time.Time `json:"lastUsedAt" doc:"When the key last opened an SSH or SFTP session; null before."`
}

func sshKeyView(k *state.SSHKey) SSHKeyView {
	return SSHKeyView{ID: k.ID, Name: k.Name, Type: k.Type, Bits: k.Bits, Fingerprint: k.Fingerprint, PublicKey: k.PublicKey,
		CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt}
}

type sshKeyResponse struct {
	SSHKey SSHKeyView `json:"sshKey"`
}

type sshKeysResponse struct {
	SSHKeys []SSHKeyView `json:"sshKeys"`
}

// AddSSHKeyRequest is the body of POST /api/account/ssh-keys.
type AddSSHKeyRequest struct {
	Name      string `json:"name" doc:"1..100 characters."`
	PublicKey string `json:"publicKey" doc:"One line of a .pub file: Ed25519, ECDSA, or RSA of 3072 bits or more. A key can be on one account only."`
}

// sshKeyRoutes are the account's SSH keys.
type sshKeyRoutes struct {
	*base
	accounts Accounts
}

func (a sshKeyRoutes) register(r *rest.Router) {
	acct := guard{scope: scopeAccount}
	a.bearer(r, acct, rest.Route{Method: "GET", Path: "/api/account/ssh-keys", Tag: "account",
		Summary:  "The account's SSH public keys: they open SSH and SFTP sessions to the sites of its workspaces (with the internals capability).",
		Response: sshKeysResponse{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			keys, err := a.store.SSHKeys(CallerFrom(req.Context()).Account.ID)
			if err != nil {
				return err
			}
			out := make([]SSHKeyView, 0, len(keys))
			for _, k := range keys {
				out = append(out, sshKeyView(k))
			}
			return rest.JSON(w, http.StatusOK, sshKeysResponse{SSHKeys: out})
		}})
	a.bearer(r, acct, rest.Route{Method: "POST", Path: "/api/account/ssh-keys", Tag: "account",
		Summary: "Add an SSH public key to the account.", Status: http.StatusCreated, Idempotent: true,
		Request: AddSSHKeyRequest{}, Response: sshKeyResponse{},
		Errors:  []string{apierr.CodeInvalidRequest, apierr.CodeConflict, apierr.CodePlanLimitReached},
		Handler: a.addSSHKey})
	a.bearer(r, acct, rest.Route{Method: "DELETE", Path: "/api/account/ssh-keys/{id}", Tag: "account",
		Summary: "Remove an SSH key; the next connection with it is refused.", Params: map[string]string{"id": "sshKey"},
		Response: deletedResponse{}, Errors: []string{apierr.CodeSSHKeyNotFound}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			if err := a.accounts.DeleteSSHKey(req.Context(), CallerFrom(req.Context()).Account, req.PathValue("id")); err != nil {
				return writeError("", err)
			}
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}})
}

func (a sshKeyRoutes) addSSHKey(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body AddSSHKeyRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(k state.SSHKey) any { return sshKeyResponse{SSHKey: sshKeyView(&k)} })
	_, err := a.accounts.AddSSHKey(req.Context(), ans, c.Account, body.Name, body.PublicKey)
	return respond(a.base, w, req, ans, err)
}
