package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sftpjail"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sshgate"
	"github.com/sandboxd/sandboxd/agent/toolbox"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// sshAccess backs the node's SSH gateway: the control plane says who may
// open a site (asked at every connection), and sessions run inside the
// site's container as its user (shells, commands) or in a jail of the
// site's WordPress root as its user (SFTP).
type sshAccess struct {
	registry agentv1connect.RegistryServiceClient
	nodeID   string
	box      *toolbox.Box
	sites    *sites.Manager
	rt       *runtime.Runtime
	// self is the binary the SFTP jail runs (this one).
	self string
}

var (
	_ sshgate.Authorizer = (*sshAccess)(nil)
	_ sshgate.Backend    = (*sshAccess)(nil)
)

// AuthorizeSSH asks the control plane, then finds the site here.
func (a *sshAccess) AuthorizeSSH(ctx context.Context, user string, key ssh.PublicKey, remote net.Addr) (*sshgate.Target, error) {
	resp, err := a.registry.AuthorizeSSH(ctx, connect.NewRequest(&agentv1.AuthorizeSSHRequest{
		NodeId: a.nodeID, SiteId: user, PublicKey: key.Marshal(), RemoteAddr: remote.String()}))
	if err != nil {
		return nil, fmt.Errorf("ask the control plane: %w", err)
	}
	if !resp.Msg.Allowed {
		return nil, errors.New(resp.Msg.Reason)
	}
	acc, err := a.box.Access(user)
	if err != nil {
		return nil, err
	}
	return &sshgate.Target{SiteID: user, Container: acc.Container, UID: uint32(acc.UID), GID: uint32(acc.UID), Root: acc.Root, Cwd: acc.Cwd}, nil
}

// loginShell is bash when the image has it, else sh.
var loginShell = []string{"/bin/sh", "-c", "[ -x /bin/bash ] && exec /bin/bash -l; exec /bin/sh -l"}

// Exec runs a shell or a command in the site's container as its user.
func (a *sshAccess) Exec(ctx context.Context, t *sshgate.Target, p sshgate.Process) (int, error) {
	// A sleeping site is woken, and kept awake for the session.
	release, err := a.sites.Hold(ctx, t.SiteID, sites.DoorSSH)
	if err != nil {
		return -1, err
	}
	defer release()
	argv := p.Argv
	if len(argv) == 0 {
		argv = loginShell
	}
	var resize chan runtime.WindowSize
	if p.Resize != nil {
		resize = make(chan runtime.WindowSize, 1)
		done := make(chan struct{})
		defer close(done)
		go func() { // ends with the session
			for {
				select {
				case w := <-p.Resize:
					select {
					case resize <- runtime.WindowSize(w):
					case <-done:
						return
					}
				case <-done:
					return
				}
			}
		}()
	}
	return a.rt.ExecInteractive(ctx, t.Container, runtime.InteractiveProcess{Argv: argv, Env: p.Env, UID: t.UID, GID: t.GID,
		Cwd: t.Cwd, TTY: p.TTY, Size: runtime.WindowSize(p.Size), Resize: resize, Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr})
}

// SFTP serves the session from a jail of the site's WordPress root, as
// the site's user.
func (a *sshAccess) SFTP(ctx context.Context, t *sshgate.Target, rw io.ReadWriteCloser) error {
	// The jail needs no container, but a session is traffic: the site
	// wakes, as for any visitor, and stays awake while it lasts.
	release, err := a.sites.Hold(ctx, t.SiteID, sites.DoorSSH)
	if err != nil {
		return err
	}
	defer release()
	cmd := sftpjail.Command(ctx, a.self, t.Root, int(t.UID), int(t.GID))
	stderr := &cappedBuffer{max: 4 << 10}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = rw, rw, stderr
	if err := cmd.Run(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("sftp jail: %w: %s", err, stderr.String())
	}
	return nil
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf)
}

// startSSH starts the node's SSH gateway when an address is configured.
func (a *Agent) startSSH() error {
	if a.cfg.SSHAddr == "" {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := sshgate.DefaultConfig()
	cfg.Addr, cfg.HostKeyPath, cfg.Logger = a.cfg.SSHAddr, filepath.Join(a.cfg.DataDir, "ssh", "host_ed25519_key"), a.cfg.Logger
	cfg.Auth = &sshAccess{registry: a.registry, nodeID: a.cfg.NodeID, box: a.box, sites: a.sites, rt: a.rt, self: self}
	cfg.Backend = cfg.Auth.(*sshAccess)
	g, err := sshgate.New(cfg)
	if err != nil {
		return fmt.Errorf("ssh gateway on %s (another address with --ssh-addr, none with --ssh-addr ''): %w", a.cfg.SSHAddr, err)
	}
	a.ssh = g
	go func() { // ends with Close
		if err := g.Serve(); err != nil {
			a.log.Error("ssh gateway stopped", "err", err)
		}
	}()
	return nil
}

// sshPublicAddr is the gateway's address as customers reach it.
func (a *Agent) sshPublicAddr() string {
	if a.ssh == nil {
		return ""
	}
	if a.cfg.SSHPublicAddr != "" {
		return a.cfg.SSHPublicAddr
	}
	return a.ssh.Addr().String()
}
