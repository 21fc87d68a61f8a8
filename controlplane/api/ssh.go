package api

import (
	"net"
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/sshkey"
)

// SSHAccess is how to open a shell or SFTP in a site.
type SSHAccess struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Username string `json:"username" doc:"The site's id: the gateway opens this site for keys of the account's that may."`
	Command  string `json:"command" doc:"An OpenSSH command line that opens a shell in the site (as its user, in its WordPress root)."`
	// SFTPCommand opens SFTP, confined to the site's WordPress root.
	SFTPCommand string `json:"sftpCommand"`
	// HostKey is the gateway's public host key; HostKeyFingerprint its
	// SHA256 fingerprint, as ssh shows it on the first connection; and
	// KnownHosts the line for ~/.ssh/known_hosts.
	HostKey            string `json:"hostKey"`
	HostKeyFingerprint string `json:"hostKeyFingerprint"`
	KnownHosts         string `json:"knownHosts"`
}

type sshResponse struct {
	SSH SSHAccess `json:"ssh"`
}

// sshRoutes are a site's SSH and SFTP access.
type sshRoutes struct {
	*base
}

func (a sshRoutes) register(r *rest.Router) {
	a.bearer(r, guard{scope: scopeWorkspace, capability: access.Internals}, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/ssh",
		Tag: "sites", Params: siteParam, Response: sshResponse{},
		Summary: "How to SSH or SFTP into the site: the gateway of its node takes the keys at /api/account/ssh-keys of members " +
			"with the internals capability (asked again at every connection).",
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			n, err := a.store.Node(s.NodeID)
			if err != nil {
				return err
			}
			if n == nil || n.SSHAddr == "" {
				return apierr.Invalid("", "SSH is not enabled on the node this site runs on")
			}
			host, p, err := net.SplitHostPort(n.SSHAddr)
			if err != nil {
				return apierr.Invalid("", "the node's SSH address %q is not host:port", n.SSHAddr)
			}
			port, _ := strconv.Atoi(p)
			out := SSHAccess{Host: host, Port: port, Username: s.ID, HostKey: n.SSHHostKey,
				Command:     "ssh -p " + p + " " + s.ID + "@" + host,
				SFTPCommand: "sftp -P " + p + " " + s.ID + "@" + host}
			if k, err := sshkey.Parse(n.SSHHostKey); err == nil {
				out.HostKeyFingerprint = k.Fingerprint
				out.KnownHosts = "[" + host + "]:" + p + " " + k.Authorized
				if port == 22 {
					out.KnownHosts = host + " " + k.Authorized
				}
			}
			return rest.JSON(w, http.StatusOK, sshResponse{SSH: out})
		}})
}
