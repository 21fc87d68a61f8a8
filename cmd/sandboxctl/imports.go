package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, importsCmd) }

// importsPath is the workspace's imports.
const importsPath = "/api/app/imports"

func importsCmd(e *env) *cobra.Command {
	return group("imports", "Push a local WordPress site (directory or archive) into a sandbox",
		"  sandboxctl imports push ./public_html\n  sandboxctl imports list",
		importsPush(e), importsResume(e), importsList(e), importsGet(e), importsCancel(e), importsDelete(e))
}

// importsSignals is the context of a push: SIGINT or SIGTERM cancels it
// (a second one kills the process as usual, the handler being gone).
func importsSignals(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, cancel
}

func importsUploadFlags(c *cobra.Command, o *importsOptions) {
	c.Flags().StringVar(&o.chunk, "chunk-size", "8M", "bytes per upload request, 1K to 64M")
	c.Flags().StringVar(&o.rate, "limit-rate", "", "cap the upload in bytes/s, as curl: 500K, 2M")
	c.Flags().BoolVar(&o.noWait, "no-wait", false, "return once uploaded; do not wait for the restore")
}

func importsPush(e *env) *cobra.Command {
	var o importsOptions
	c := &cobra.Command{
		Use:   "push PATH",
		Short: "Upload a WordPress directory or archive into a sandbox",
		Long: `Upload a local WordPress site and restore it into a new sandbox (or, with
--site, into an existing one in place).

PATH is a WordPress directory (its root, the one holding wp-content/) or an
archive: .tar, .tar.gz/.tgz, .tar.zst or .zip holding a .sql dump and
wp-content/, or a whole WordPress root.

A directory is packed into a tar.gz in the cache directory
(~/.cache/sandboxctl/imports, or $SANDBOXCTL_CACHE/imports) holding:
  - the database dump: --sql FILE, or the one .sql or .sql.gz file at the
    directory's top (make one with ` + "`wp db export dump.sql`" + `);
  - wp-content/, walked without following symlinks: a symlink that points
    inside wp-content is stored as a symlink, any other is left out (and
    listed); sockets and devices are left out too;
  - a stub wp-config.php with only the table prefix and DB_CHARSET: the
    real one, with its passwords and keys, is not sent.
WordPress core files are not sent: the sandbox has its own.

--source-url is the live site's address, replaced by the sandbox's URL in
the database; it defaults to WP_HOME (else WP_SITEURL) in the directory's
wp-config.php and is required otherwise.

Progress goes to stderr: a bar on a terminal, else a line after the first
chunk and at most one per 10%. When the site is ready, its URL and a
one-time login link go to stdout (--json: the import as GET
/api/app/imports/{id} answers).

Ctrl-C (or SIGTERM) stops the upload and exits with 130, keeping a small
state file next to the archive: run the same command again (same server,
workspace and PATH), or ` + "`sandboxctl imports resume IMPORT`" + `, to go on from
the byte the server holds. --restart drops that state and starts a new
import. The state and the packed archive are removed when the import ends
(or with ` + "`sandboxctl imports cancel IMPORT`" + `).`,
		Example: `  wp db export dump.sql --path=./public_html
  sandboxctl imports push ./public_html --sql dump.sql
  sandboxctl imports push site.tar.gz --source-url https://shop.example.com
  sandboxctl imports push ./public_html --site site_abc --limit-rate 2M
  sandboxctl imports push ./public_html --no-wait --json | jq -r .import.id`,
		Args: importsArgs(1, "PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return importsRun(e, cmd, &o, func(ctx context.Context, p *importsPusher) error {
				return p.push(ctx, args[0], cmd.Flags().Changed)
			})
		},
	}
	c.Flags().StringVar(&o.site, "site", "", "restore into this ready site (default: a new one)")
	c.Flags().StringVar(&o.sourceURL, "source-url", "", "live site URL (default: WP_HOME in wp-config.php)")
	c.Flags().StringVar(&o.sql, "sql", "", "dump to send (default: the .sql at PATH's top)")
	c.Flags().BoolVar(&o.restart, "restart", false, "drop a saved interrupted upload; start anew")
	importsUploadFlags(c, &o)
	return c
}

// importsRun is what push and resume share: the upload flags checked,
// then run given a pusher on this invocation's client, under a context
// that SIGINT or SIGTERM cancels.
func importsRun(e *env, cmd *cobra.Command, o *importsOptions, run func(context.Context, *importsPusher) error) error {
	if err := o.parse(); err != nil {
		return err
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	ctx, cancel := importsSignals(cmd.Context())
	defer cancel()
	return run(ctx, newImportsPusher(e, c, *o, cancel))
}

// importsArgs wants exactly n arguments, named in the message.
func importsArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s wants %s (got %d arguments)", cmd.CommandPath(), names, len(args))}
		}
		return nil
	}
}

func importsResume(e *env) *cobra.Command {
	var o importsOptions
	c := &cobra.Command{
		Use:   "resume IMPORT",
		Short: "Go on with an interrupted push, or wait again for its restore",
		Long: `Go on with a push that was interrupted, from the byte the server holds, using
the archive and state it kept on this machine; an import already restoring
is waited for. Running the same ` + "`imports push`" + ` command again does the same.`,
		Example: "  sandboxctl imports resume imp_abc\n  sandboxctl imports resume imp_abc --limit-rate 1M --json",
		Args:    importsArgs(1, "IMPORT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return importsRun(e, cmd, &o, func(ctx context.Context, p *importsPusher) error {
				st, err := importsFindState(args[0])
				if err != nil {
					return err
				}
				if st == nil {
					return p.resumeUnsaved(ctx, args[0])
				}
				if strings.TrimRight(st.Server, "/") != strings.TrimRight(p.c.Base, "/") {
					return usageError{fmt.Errorf("import %s was pushed to %s: add --server %s", args[0], st.Server, st.Server)}
				}
				if st.Workspace != "" && p.c.Workspace == "" {
					p.c.Workspace = st.Workspace
				}
				if done, err := p.goOn(ctx, st); done {
					return err
				}
				return fmt.Errorf("import %s cannot go on (see above): push %s again to start a new import", args[0], st.Source)
			})
		},
	}
	importsUploadFlags(c, &o)
	return c
}

// resumeUnsaved handles an import with no saved state here: one that is
// restoring is waited for, a ready one is shown.
func (p *importsPusher) resumeUnsaved(ctx context.Context, id string) error {
	r, err := p.get(ctx, id)
	if err != nil {
		return err
	}
	switch status := r.Str("import.status"); status {
	case "restoring":
		p.say("import %s is restoring; waiting for it", id)
		return p.wait(ctx, &importsState{ImportID: id})
	case "ready":
		return p.printReady(r)
	case "awaiting_upload", "uploading":
		return fmt.Errorf("import %s has no saved upload on this machine: push its directory or archive again "+
			"(with --restart), or drop it with `sandboxctl imports cancel %s`", id, id)
	default:
		return p.failure(ctx, r)
	}
}

func importsList(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "The workspace's imports, newest first", Args: importsArgs(0, "no arguments"),
		Example: "  sandboxctl imports list\n  sandboxctl imports list --json | jq -r '.imports[].siteUrl // empty'",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", importsPath, nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, im := range r.List("imports") {
					size, _ := importsNum(im["sizeBytes"])
					src := strings.TrimPrefix(strings.TrimPrefix(str(im["sourceUrl"]), "https://"), "http://")
					rows = append(rows, []string{str(im["id"]), str(im["status"]), byteSize(size), clip(src, 19), ago(im["createdAt"])})
				}
				if len(rows) == 0 {
					fmt.Fprintln(e.stdout, "no imports yet: sandboxctl imports push PATH")
					return
				}
				e.table([]string{"ID", "STATUS", "SIZE", "SOURCE", "CREATED"}, rows)
			})
		},
	}
}

func importsGet(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "get IMPORT", Short: "One import: status, progress, site and a login link",
		Example: "  sandboxctl imports get imp_abc\n  sandboxctl imports get imp_abc --json | jq -r .loginUrl",
		Args:    importsArgs(1, "IMPORT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("GET", apiPath(importsPath, args[0]), nil, func(r *apiclient.Response) {
				size, _ := importsNum(r.Get("import.sizeBytes"))
				got, _ := importsNum(r.Get("import.receivedBytes"))
				pct, _ := importsNum(r.Get("progress.percent"))
				rows := [][2]string{{"id", r.Str("import.id")}, {"status", r.Str("import.status")},
					{"progress", fmt.Sprintf("%s %d%%", r.Str("progress.phase"), pct)},
					{"source", clip(r.Str("import.sourceUrl"), 66)},
					{"size", fmt.Sprintf("%s (%s received)", byteSize(size), byteSize(got))},
					{"site", orElse(r.Str("import.siteId"), "- (a new one, made when the upload is complete)")},
					{"created", ago(r.Get("import.createdAt"))}}
				if u := r.Str("siteUrl"); u != "" {
					rows = append(rows, [2]string{"url", clip(u, 66)})
				}
				if why := r.Str("import.failureReason"); why != "" {
					rows = append(rows, [2]string{"failure", clip(why, 66)})
				}
				e.fields(rows)
				if l := r.Str("loginUrl"); l != "" {
					fmt.Fprintf(e.stdout, "log in (one-time link):\n%s\n", l)
				}
			})
		},
	}
}

func importsCancel(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "cancel IMPORT", Short: "Cancel an unfinished import (its history stays)",
		Example: "  sandboxctl imports cancel imp_abc",
		Args:    importsArgs(1, "IMPORT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return importsDrop(e, args[0], "")
		},
	}
}

func importsDelete(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "delete IMPORT", Short: "Remove an import from the history (a site it made stays)",
		Example: "  sandboxctl imports delete imp_abc",
		Args:    importsArgs(1, "IMPORT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return importsDrop(e, args[0], "?action=delete")
		},
	}
}

// importsDrop cancels or deletes an import and removes what this
// machine kept to resume it.
func importsDrop(e *env, id, query string) error {
	r, err := e.api("DELETE", apiPath(importsPath, id)+query, nil)
	if err != nil && !importsIsCode(err, "import_not_found") {
		return err
	}
	if st, _ := importsFindState(id); st != nil {
		st.remove()
		fmt.Fprintf(e.stderr, "removed the saved upload of %s\n", id)
	}
	if err != nil {
		return err
	}
	return e.reply(r, func(*apiclient.Response) {
		if query == "" {
			fmt.Fprintf(e.stdout, "cancelled %s\n", id)
		} else {
			fmt.Fprintf(e.stdout, "deleted %s (a site it made stays)\n", id)
		}
	})
}
