// Command sandboxd runs the sandbox service: `server` (a control-plane
// node), `dev` (everything on one machine with embedded defaults) and
// `admin` (operator commands against a running server).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/logwriter"
	"github.com/sandboxd/sandboxd/agent/sftpjail"
	"github.com/sandboxd/sandboxd/controlplane/server"
)

const usage = `sandboxd: self-hostable disposable WordPress sandboxes

Usage:
  sandboxd dev     [flags]   run everything on this machine (embedded defaults)
  sandboxd server  [flags]   run a control-plane server (Raft member)
  sandboxd agent   [flags]   run a node agent (sites on containerd) for a control plane
  sandboxd edge    [flags]   run an edge proxy that serves the sites
  sandboxd admin   COMMAND   operator commands against a running server
  sandboxd version

Run "sandboxd COMMAND -h" for a command's flags.
`

func main() {
	// A containerd shim starts this binary as a site's container logger.
	if logwriter.Invoked() {
		os.Exit(logwriter.Main(os.Args[1:]))
	}
	// The SSH gateway starts this binary to serve SFTP jailed in a site.
	if sftpjail.Invoked() {
		os.Exit(sftpjail.Main(os.Args[1:]))
	}
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	server.Version, agent.Version = version, version
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "dev":
		err = runDev(args)
	case "server":
		err = runServer(args)
	case "agent":
		err = runAgent(args)
	case "edge":
		err = runEdge(args)
	case "admin":
		err = runAdmin(args, os.Stdout)
	case "version":
		fmt.Println(version)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "sandboxd: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "sandboxd:", err)
		os.Exit(1)
	}
}

// flagOutput is where a command's flag errors and -h go (a test reads it).
var flagOutput io.Writer = os.Stderr

// newFlagSet is a command's flag set. Usage strings never hold
// backquotes: the flag package prints a backquoted word as the flag's
// argument name ("-images-dir make images").
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(flagOutput)
	return fs
}

// namespaceUsage is the agent's and dev's --containerd-namespace.
const namespaceUsage = "containerd namespace of this agent's images and containers (default: one of its own); agents of one host " +
	"may share one, so that each image is unpacked once for all of them (each agent's containers are prefixed with its own scope)"

// phpVersionsUsage is the agent's and dev's --php-versions.
const phpVersionsUsage = "comma-separated PHP versions this node offers, e.g. 8.2,8.4 (default: every version the image cache has); " +
	"only these are imported and advertised"

// version is the release; `go build -ldflags "-X main.version=…"` sets
// it, and every component reports it (health, registration, nodes).
var version = "0.1.0"

// errUsage reports bad usage whose help text was already printed.
var errUsage = errors.New("usage")

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}
