package sshgate

import (
	"context"
	"io"
	"net"

	"golang.org/x/crypto/ssh"
)

// Authorizer decides, at every connection, which site a client may open.
// The gateway keeps no answer from one connection to the next, so a key
// or a member removed in the control plane is refused at its next
// connection.
type Authorizer interface {
	// AuthorizeSSH returns the site that user (the SSH user name, a site
	// id) opens with key from remote, or an error if the key may not.
	// It may be called for keys the client only offers and then does not
	// use, and several times per connection; ctx ends with the handshake
	// deadline or the gateway. The error is never shown to the client.
	// A Target whose UID or GID is 0 is refused.
	AuthorizeSSH(ctx context.Context, user string, key ssh.PublicKey, remote net.Addr) (*Target, error)
}

// Target is the site an authorized connection works in; only the
// Authorizer sets it, nothing the client sends later changes it.
type Target struct {
	// SiteID names the site in logs.
	SiteID string
	// Container is the site's container id on this node.
	Container string
	// UID and GID are the site's user on the host; never 0.
	UID, GID uint32
	// Root is the host path of the site's WordPress root, which SFTP is
	// confined to; a directory inside a root-owned one.
	Root string
	// Cwd is the WordPress root inside the container, where shells and
	// commands start (e.g. /srv/site/wordpress).
	Cwd string
}

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Cols, Rows uint16
}

// Process is what a client asked to run: a shell or a command, with or
// without a terminal. It mirrors the runtime's InteractiveProcess; the
// user, group and directory come from the Target.
type Process struct {
	// Argv is the command, or empty for an interactive login shell: the
	// backend picks it (/bin/bash -l where present, else /bin/sh).
	Argv []string
	// Env holds the variables the client may set: TERM, LANG and LC_*.
	Env []string
	// TTY is set when the client asked for a terminal; Stdout then
	// carries both streams.
	TTY bool
	// Size is the terminal's size at start (zero without a TTY).
	Size WindowSize
	// Resize delivers the client's window changes; it is never closed and
	// only the latest pending change is kept.
	Resize <-chan WindowSize
	// Stdin is the client's input; it returns io.EOF once the client
	// closed it.
	Stdin io.Reader
	// Stdout and Stderr go to the client; writes block while the client
	// does not read.
	Stdout, Stderr io.Writer
}

// Backend runs sessions inside a site. Both calls block until the session
// is over and must return soon after ctx ends (the client went away or
// the gateway is closing), leaving nothing running.
type Backend interface {
	// Exec runs p as the site's user in its container and returns its
	// exit code. An error means it could not be run or was cut short.
	Exec(ctx context.Context, t *Target, p Process) (int, error)
	// SFTP serves the SFTP protocol on rw, confined to t.Root as the
	// site's user, until the client closes it.
	SFTP(ctx context.Context, t *Target, rw io.ReadWriteCloser) error
}
