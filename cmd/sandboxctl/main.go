// Command sandboxctl is the customer's command line for sandboxd: log in,
// then create, inspect and remove sites from a terminal or a CI pipeline.
// Exit codes: 0 done; 1 the API refused (its error.code on stderr) or
// could not be reached; 2 the command line was wrong; 130 an upload was
// interrupted (Ctrl-C) and can be resumed.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sandboxd/sandboxd/apiclient"
)

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

// usageError is a wrong command line: exit code 2.
type usageError struct{ error }

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run executes one command line and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(&env{stdin: stdin, stdout: stdout, stderr: stderr})
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	var ue usageError
	var ae *apiclient.Error
	var ec interface{ ExitCode() int }
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue), isCobraUsage(err):
		fmt.Fprintf(stderr, "sandboxctl: %v\n", err)
		return 2
	case errors.As(err, &ec):
		fmt.Fprintf(stderr, "sandboxctl: %v\n", err)
		return ec.ExitCode()
	case errors.As(err, &ae):
		code := ae.Code
		if code == "" {
			code = fmt.Sprintf("http_%d", ae.Status)
		}
		fmt.Fprintf(stderr, "sandboxctl: %s: %s\n", code, ae.Message)
		return 1
	default:
		fmt.Fprintf(stderr, "sandboxctl: %v\n", err)
		return 1
	}
}
