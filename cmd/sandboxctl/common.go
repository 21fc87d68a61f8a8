package main

// Helpers every command family shares, so that each piece of logic lives
// once: sending a request as this invocation's caller and printing its
// answer, starting and waiting for jobs, command groups, and the small
// formatters and checks that tables and progress output use.

import (
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

// group is a command that only holds subcommands; run bare, it prints
// its help. example may be "".
func group(use, short, example string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Example: example, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	c.AddCommand(subs...)
	return c
}

// example sets a command's examples and returns it, for commands made by
// a constructor that takes none.
func example(c *cobra.Command, ex string) *cobra.Command {
	c.Example = ex
	return c
}

// request sends one request as this invocation's caller (the client of
// e.client) and returns the client too, for commands that go on to send
// more requests or wait for a job with it.
func (e *env) request(method, path string, body any, header ...string) (*apiclient.Client, *apiclient.Response, error) {
	c, err := e.client()
	if err != nil {
		return nil, nil, err
	}
	r, err := call(c, method, path, body, header...)
	if err != nil {
		return nil, nil, err
	}
	return c, r, nil
}

// api sends one request as this invocation's caller and returns the
// answer, for commands that need nothing else of the client.
func (e *env) api(method, path string, body any, header ...string) (*apiclient.Response, error) {
	_, r, err := e.request(method, path, body, header...)
	return r, err
}

// reply prints an answer: the API's JSON with --json, else what human
// writes for a person.
func (e *env) reply(r *apiclient.Response, human func(*apiclient.Response)) error {
	if e.json {
		return e.printJSON(r)
	}
	human(r)
	return nil
}

// send is the whole of most commands: one request as this invocation's
// caller, its answer printed by reply.
func (e *env) send(method, path string, body any, human func(*apiclient.Response), header ...string) error {
	r, err := e.api(method, path, body, header...)
	if err != nil {
		return err
	}
	return e.reply(r, human)
}

// sendWith is send on a client the command already holds (one that
// resolved the workspace, or whose base URL the printer needs).
func (e *env) sendWith(c *apiclient.Client, method, path string, body any, human func(*apiclient.Response), header ...string) error {
	r, err := call(c, method, path, body, header...)
	if err != nil {
		return err
	}
	return e.reply(r, human)
}

// startJob sends a request whose answer names a job (jobId) and, with
// wait (--wait), waits until that job ends; a failed job is the error.
func (e *env) startJob(wait bool, method, path string, body any, header ...string) (*apiclient.Response, error) {
	c, r, err := e.request(method, path, body, header...)
	if err != nil {
		return nil, err
	}
	return e.afterJob(c, r, wait, "", "")
}

// afterJob is what --wait does after a request that started a job:
// without wait, the answer r as it is; with wait, the job r names is
// waited for and then path (when set) is read again, so that the answer
// shows the object as the job left it. what, when set, names the object
// in a failed wait's error ("template tpl_abc: …").
func (e *env) afterJob(c *apiclient.Client, r *apiclient.Response, wait bool, what, path string) (*apiclient.Response, error) {
	if !wait {
		return r, nil
	}
	if err := waitJob(e, c, r.Str("jobId")); err != nil {
		if what != "" {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return nil, err
	}
	if path == "" {
		return r, nil
	}
	return call(c, "GET", path, nil)
}

// apiPath joins an API path and segments, escaping each segment (ids
// and names typed by a person).
func apiPath(base string, segments ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, s := range segments {
		b.WriteString("/")
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// idempotencyKey is the Idempotency-Key of a request that creates
// something or starts a job, so that retries of that request (sandboxctl's
// own, or the same command run again with SANDBOXCTL_IDEMPOTENCY_KEY set
// to it) cannot do it twice. Set, that variable is the key of the
// command's first such request; a later one in the same command gets
// "-2", "-3" after it, so a command run again sends the same keys in the
// same order.
func (e *env) idempotencyKey() string {
	e.keys++
	if base := os.Getenv("SANDBOXCTL_IDEMPOTENCY_KEY"); base != "" {
		if e.keys == 1 {
			return base
		}
		return fmt.Sprintf("%s-%d", base, e.keys)
	}
	return "sandboxctl-" + rand.Text()
}

// fields prints an object as a two-column FIELD/VALUE table.
func (e *env) fields(rows [][2]string) {
	out := make([][]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, []string{r[0], r[1]})
	}
	e.table([]string{"FIELD", "VALUE"}, out)
}

// clip shortens s to at most n characters, ending in an ellipsis when it
// cut something, so that table cells and lines keep to their width.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	return string([]rune(s)[:n-1]) + "…"
}

// orElse is s, or dflt when s is empty (a field the answer left out).
func orElse(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// byteSize is a byte count as a person reads it: 999 B, 4.0 MiB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// jsonByteSize is byteSize of a JSON number of an answer, "-" when the
// field is missing or null.
func jsonByteSize(v any) string {
	n, ok := v.(float64)
	if !ok {
		return "-"
	}
	return byteSize(int64(n))
}

// isTerminal reports whether a stream (stdin, stdout or stderr) is a
// terminal, a person's rather than a file's or a pipe's.
func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// paint wraps s in an SGR colour code when color is set.
func paint(color bool, code, s string) string {
	if !color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}
