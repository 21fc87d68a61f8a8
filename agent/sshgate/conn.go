package sshgate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// targetKey holds the authorized Target in ssh.Permissions.ExtraData.
type targetKey struct{}

// fingerprintExt holds the authenticating key's fingerprint in
// ssh.Permissions.Extensions, for logs.
const fingerprintExt = "sandboxd-key-fingerprint"

// errRefused is what a client learns of any refusal: nothing.
var errRefused = errors.New("sshgate: key refused")

// authorize is the PublicKeyCallback: it asks the Authorizer for every
// key offered. x/crypto hands the connection the Permissions of the key
// that actually signed, so the Target is the one that key was given.
//
// Refusals are charged to the client's address (Config.AuthFailures);
// an address whose budget is spent is refused before anything is asked.
// Each ask takes from the budget before it starts, and a key let in
// gives it back: asks in flight at once from one address (its parallel
// connections) cannot all pass its last failure.
func (g *Gateway) authorize(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	fp := ssh.FingerprintSHA256(key)
	addr := addrKey(md.RemoteAddr()).String()
	if ok, wait := g.failures.Allow(addr); !ok {
		g.log.Debug("ssh key refused: too many failed logins from the address", "user", md.User(),
			"remote", md.RemoteAddr().String(), "retry_in", wait.Round(time.Second))
		return nil, errRefused
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.HandshakeTimeout)
	defer cancel()
	t, err := g.cfg.Auth.AuthorizeSSH(ctx, md.User(), key, md.RemoteAddr())
	if err == nil && t == nil {
		err = errors.New("no target")
	}
	if err == nil && (t.UID == 0 || t.GID == 0 || t.Container == "" || t.SiteID == "") {
		g.log.Error("ssh authorizer returned an unusable target", "user", md.User(), "site_id", t.SiteID, "uid", t.UID, "gid", t.GID)
		err = errors.New("unusable target")
	}
	if err != nil {
		g.log.Debug("ssh key refused", "user", md.User(), "remote", md.RemoteAddr().String(), "fingerprint", fp, "err", err)
		return nil, errRefused
	}
	g.failures.Refund(addr)
	tc := *t
	return &ssh.Permissions{
		Extensions: map[string]string{fingerprintExt: fp},
		ExtraData:  map[any]any{targetKey{}: &tc},
	}, nil
}

// handleConn runs one client connection: handshake within the deadline,
// then its sessions until the connection ends.
func (g *Gateway) handleConn(nc net.Conn) {
	remote := nc.RemoteAddr().String()
	ic := newIdleConn(nc, g.cfg.IdleTimeout)
	defer ic.Close()
	_ = nc.SetDeadline(time.Now().Add(g.cfg.HandshakeTimeout))
	sconn, chans, reqs, err := ssh.NewServerConn(ic, g.ssh)
	if err != nil {
		g.log.Info("ssh handshake failed", "remote", remote, "err", err)
		return
	}
	_ = nc.SetDeadline(time.Time{})
	t, _ := sconn.Permissions.ExtraData[targetKey{}].(*Target)
	if t == nil { // cannot happen: only authorize grants access
		sconn.Close()
		return
	}
	log := g.log.With("site_id", t.SiteID, "remote", remote, "user", sconn.User(),
		"fingerprint", sconn.Permissions.Extensions[fingerprintExt])
	start := time.Now()
	log.Info("ssh connection opened")
	ctx, cancel := context.WithCancel(g.ctx)
	var sessions sync.WaitGroup
	defer func() {
		cancel()
		sconn.Close()
		sessions.Wait()
		log.Info("ssh connection closed", "duration", time.Since(start).Round(time.Millisecond))
	}()
	// Global requests are port forwarding (tcpip-forward) and keepalives:
	// all are answered no.
	go ssh.DiscardRequests(reqs)
	open := make(chan struct{}, g.cfg.MaxSessionsPerConn)
	for nch := range chans {
		if nch.ChannelType() != "session" {
			log.Info("ssh channel refused", "type", nch.ChannelType())
			_ = nch.Reject(ssh.Prohibited, "only sessions are allowed")
			continue
		}
		select {
		case open <- struct{}{}:
		default:
			_ = nch.Reject(ssh.ResourceShortage, fmt.Sprintf("at most %d sessions per connection", g.cfg.MaxSessionsPerConn))
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			<-open
			continue
		}
		sessions.Add(1)
		// Owned by this connection; ends when the channel closes, and the
		// process in it when ctx does.
		go func() {
			defer sessions.Done()
			defer func() { <-open }()
			s := &session{g: g, t: t, ch: ch, log: log}
			s.serve(ctx, creqs)
		}()
	}
}
