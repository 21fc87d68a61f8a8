package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/server"
)

// commonFlags are the flags server and dev share.
type commonFlags struct {
	cfg       server.Config
	logFormat string
	logLevel  string
	join      string
}

func (c *commonFlags) register(fs *flag.FlagSet, logFormat string) {
	c.cfg = server.DefaultConfig()
	fs.StringVar(&c.cfg.DataDir, "data-dir", c.cfg.DataDir, "directory for all state")
	fs.StringVar(&c.cfg.APIAddr, "api-addr", c.cfg.APIAddr, "listen address of the REST API")
	fs.StringVar(&c.cfg.AdvertiseAPI, "advertise-api", "", "API URL other servers and emails use (default http://<api-addr>)")
	fs.StringVar(&c.cfg.SMTP.Addr, "smtp-addr", os.Getenv("SANDBOXD_SMTP_ADDR"), "SMTP server host:port for invitation email (default: keep mail in the outbox)")
	fs.StringVar(&c.cfg.SMTP.From, "smtp-from", "sandboxd@localhost", "sender address of outgoing email")
	fs.StringVar(&c.cfg.SMTP.Username, "smtp-username", os.Getenv("SANDBOXD_SMTP_USERNAME"), "SMTP username (password from SANDBOXD_SMTP_PASSWORD)")
	fs.StringVar(&c.logFormat, "log-format", logFormat, "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	c.cfg.SMTP.Password = os.Getenv("SANDBOXD_SMTP_PASSWORD")
	c.cfg.ClusterToken = os.Getenv("SANDBOXD_CLUSTER_TOKEN")
}

func (c *commonFlags) start() (*server.Server, error) {
	log, err := newLogger(os.Stderr, c.logFormat, c.logLevel)
	if err != nil {
		return nil, err
	}
	c.cfg.Logger = log
	s, err := server.New(c.cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func runServer(args []string) error {
	fs := flag.NewFlagSet("sandboxd server", flag.ContinueOnError)
	var c commonFlags
	c.register(fs, "json")
	fs.StringVar(&c.cfg.NodeID, "node-id", "", "server id in the Raft cluster (default: made once and kept in the data dir)")
	fs.StringVar(&c.cfg.RaftAddr, "raft-addr", "127.0.0.1:8300", "listen address of Raft")
	fs.StringVar(&c.cfg.AdvertiseRaftAddr, "advertise-raft", "", "Raft address peers dial (default --raft-addr)")
	fs.StringVar(&c.join, "join", "", "API URL(s) of existing servers, comma-separated; joins instead of bootstrapping")
	fs.StringVar(&c.cfg.ClusterToken, "cluster-token", c.cfg.ClusterToken, "shared cluster token (or SANDBOXD_CLUSTER_TOKEN; default: made once in the data dir)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.join != "" {
		c.cfg.Bootstrap = false
		for _, p := range strings.Split(c.join, ",") {
			if p = strings.TrimSpace(p); p != "" {
				if !strings.Contains(p, "://") {
					p = "http://" + p
				}
				c.cfg.Join = append(c.cfg.Join, p)
			}
		}
	}
	s, err := c.start()
	if err != nil {
		return err
	}
	fmt.Printf("sandboxd server %s: API %s, Raft %s\n", s.Node().ID(), s.URL(), c.cfg.RaftAddr)
	waitSignal()
	return s.Close()
}

func runDev(args []string) error {
	fs := flag.NewFlagSet("sandboxd dev", flag.ContinueOnError)
	var c commonFlags
	c.register(fs, "text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := c.start()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitLeader(ctx); err != nil {
		s.Close()
		return err
	}
	token, err := s.EnsureDevOwner(ctx)
	if err != nil {
		s.Close()
		return err
	}
	fmt.Printf("SANDBOX_URL=%s\nSANDBOX_TOKEN=%s\n", s.URL(), token)
	fmt.Fprintf(os.Stderr, "\nsandboxd dev is running; data in %s (also written to %s/%s).\nTry:\n  curl -s %s/api/account/me -H \"Authorization: Bearer %s\"\n\n",
		c.cfg.DataDir, c.cfg.DataDir, server.DevEnvFile, s.URL(), token)
	waitSignal()
	return s.Close()
}

func waitSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	<-ch
	signal.Stop(ch)
}
