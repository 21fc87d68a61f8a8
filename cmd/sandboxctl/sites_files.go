package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() {
	siteCommands = append(siteCommands, sitesFiles)
}

// sitesMaxFileBytes is the file manager's limit on one file.
const sitesMaxFileBytes = 32 << 20

// sitesFilePath is a path as the file manager's query parameters carry
// it: base64url without padding (RFC 4648 §5). Paths are sent as given,
// "..", leading "/" and all: the server decides what a path may be, and
// its refusal is the answer.
func sitesFilePath(p string) string { return base64.RawURLEncoding.EncodeToString([]byte(p)) }

// sitesFileOp POSTs one file-manager operation; params are name, path
// pairs (path, from, to).
func sitesFileOp(e *env, site, op string, body any, header []string, params ...string) (*apiclient.Response, error) {
	q := make([]string, 0, len(params)/2)
	for i := 0; i+1 < len(params); i += 2 {
		q = append(q, params[i]+"="+sitesFilePath(params[i+1]))
	}
	return e.api("POST", sitesAPI(site, "/files/"+op+"?"+strings.Join(q, "&")), body, header...)
}

func sitesFiles(e *env) *cobra.Command {
	return group("files", "Files under the WordPress root: ls, get, put, rm, mkdir, mv, cp",
		"  sandboxctl sites files ls site_abc wp-content\n"+
			"  sandboxctl sites files get site_abc wp-config.php -o wp-config.php\n"+
			"  sandboxctl sites files put site_abc ./notes.txt wp-content/uploads/",
		sitesFilesLs(e), sitesFilesGet(e), sitesFilesPut(e), sitesFilesRm(e), sitesFilesMkdir(e), sitesFilesMove(e, "mv"),
		sitesFilesMove(e, "cp"))
}

func sitesFilesLs(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "ls SITE [PATH]",
		Short: "List a directory (default: the WordPress root), like ls -l",
		Example: "  sandboxctl sites files ls site_abc\n" +
			"  sandboxctl sites files ls site_abc wp-content/plugins --json",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := sitesAPI(args[0], "/files")
			if len(args) == 2 {
				path += "?path=" + sitesFilePath(args[1])
			}
			return e.send("GET", path, nil, func(r *apiclient.Response) {
				entries := r.List("entries")
				width := 1
				for _, f := range entries {
					width = max(width, len(sitesNum(f["sizeBytes"])))
				}
				for _, f := range entries {
					kind, name := "-", str(f["name"])
					switch f["type"] {
					case "directory":
						kind, name = "d", name+"/"
					case "symlink":
						kind = "l"
					}
					fmt.Fprintf(e.stdout, "%s %*s  %-8s  %s\n", kind, width, sitesNum(f["sizeBytes"]), ago(f["modifiedAt"]), name)
				}
				if t, _ := r.Get("truncated").(bool); t {
					fmt.Fprintln(e.stderr, "sandboxctl: the directory has more than 10,000 entries; only the first are listed")
				}
			})
		},
	}
}

func sitesFilesGet(e *env) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "get SITE PATH",
		Short: "Download a file (up to 32 MiB) to stdout or a local file (-o)",
		Example: "  sandboxctl sites files get site_abc wp-config.php\n" +
			"  sandboxctl sites files get site_abc wp-content/debug.log -o debug.log",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := e.api("GET", sitesAPI(args[0], "/files/content?path="+sitesFilePath(args[1])), nil)
			if err != nil {
				return err
			}
			data, err := base64.StdEncoding.DecodeString(r.Str("contentBase64"))
			if err != nil {
				return fmt.Errorf("decode %s: %w", args[1], err)
			}
			toFile := out != "" && out != "-"
			if toFile {
				if err := os.WriteFile(out, data, 0o644); err != nil {
					return fmt.Errorf("save %s: %w", args[1], err)
				}
			}
			switch {
			case e.json:
				return e.printJSON(r)
			case toFile:
				fmt.Fprintf(e.stdout, "saved %s to %s (%d bytes)\n", args[1], out, len(data))
				return nil
			}
			_, err = e.stdout.Write(data)
			return err
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "-", "local file to write (-: stdout)")
	return c
}

func sitesFilesPut(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "put SITE LOCAL PATH",
		Short: "Upload a local file (or stdin) to a path in the site",
		Long: `put uploads LOCAL to PATH, replacing a file there and creating parent
directories. When PATH is an existing directory (write it with a final /
to be sure) the file keeps its own name in it. LOCAL - reads stdin.`,
		Example: "  sandboxctl sites files put site_abc ./mine.php wp-content/plugins/mine/\n" +
			"  echo '<?php phpinfo();' | sandboxctl sites files put site_abc - info.php",
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			site, local, path := args[0], args[1], args[2]
			var r *apiclient.Response
			var err error
			if local == "-" {
				data, err := io.ReadAll(io.LimitReader(e.stdin, sitesMaxFileBytes+1))
				if err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
				if len(data) > sitesMaxFileBytes {
					return fmt.Errorf("stdin holds more than the %d MiB a file may have", sitesMaxFileBytes>>20)
				}
				r, err = sitesFileOp(e, site, "write", map[string]string{"contentBase64": base64.StdEncoding.EncodeToString(data)}, nil,
					"path", path)
				if err != nil {
					return err
				}
			} else {
				body, ctype, err := sitesMultipartFile(local)
				if err != nil {
					return err
				}
				if r, err = sitesFileOp(e, site, "upload", body, []string{"Content-Type", ctype}, "path", path); err != nil {
					return err
				}
			}
			if e.json {
				return e.printJSON(r)
			}
			_, err = fmt.Fprintf(e.stdout, "wrote %s (%s bytes)\n", r.Str("path"), sitesNum(r.Get("sizeBytes")))
			return err
		},
	}
}

// sitesMultipartFile is the body of an upload: one part named file,
// holding the local file under its own name.
func sitesMultipartFile(local string) ([]byte, string, error) {
	fi, err := os.Stat(local)
	if err != nil {
		return nil, "", fmt.Errorf("upload %s: %w", local, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("upload %s: not a regular file", local)
	}
	if fi.Size() > sitesMaxFileBytes {
		return nil, "", fmt.Errorf("upload %s: %d bytes is over the %d MiB a file may have", local, fi.Size(), sitesMaxFileBytes>>20)
	}
	f, err := os.Open(local)
	if err != nil {
		return nil, "", fmt.Errorf("upload %s: %w", local, err)
	}
	defer f.Close()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	part, err := mw.CreateFormFile("file", filepath.Base(local))
	if err != nil {
		return nil, "", fmt.Errorf("upload %s: %w", local, err)
	}
	if _, err := io.Copy(part, f); err != nil {
		return nil, "", fmt.Errorf("upload %s: %w", local, err)
	}
	if err := mw.Close(); err != nil {
		return nil, "", fmt.Errorf("upload %s: %w", local, err)
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}

func sitesFilesRm(e *env) *cobra.Command {
	var recursive bool
	c := &cobra.Command{
		Use:   "rm SITE PATH",
		Short: "Delete a file (or, with -r, a directory and all it holds)",
		Example: "  sandboxctl sites files rm site_abc info.php\n" +
			"  sandboxctl sites files rm -r site_abc wp-content/plugins/hello-dolly",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !recursive {
				// The API's delete is recursive: a directory needs -r, as
				// rm would, so that a slip of the finger empties nothing.
				r, err := e.api("GET", sitesAPI(args[0], "/files?path="+sitesFilePath(args[1])), nil)
				if err == nil && r.Get("entries") != nil {
					return usageError{fmt.Errorf("%s is a directory: delete it and all it holds with rm -r", args[1])}
				}
				var ae *apiclient.Error
				if err != nil && (!errors.As(err, &ae) || ae.Code == "site_not_found") {
					return err
				}
			}
			r, err := sitesFileOp(e, args[0], "delete", nil, nil, "path", args[1])
			if err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) { fmt.Fprintf(e.stdout, "deleted %s\n", r.Str("path")) })
		},
	}
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "delete a directory and everything in it")
	return c
}

func sitesFilesMkdir(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "mkdir SITE PATH",
		Short:   "Make a directory (and its parents)",
		Example: "  sandboxctl sites files mkdir site_abc wp-content/uploads/imports",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := sitesFileOp(e, args[0], "mkdir", nil, nil, "path", args[1])
			if err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) { fmt.Fprintf(e.stdout, "made %s\n", r.Str("path")) })
		},
	}
}

// sitesFilesMove is mv (the API's rename) or cp (its copy); both refuse
// an existing destination.
func sitesFilesMove(e *env, use string) *cobra.Command {
	op, short, verb := "rename", "Move or rename a file or directory (never over an existing one)", "moved"
	if use == "cp" {
		op, short, verb = "copy", "Copy a file or directory (never over an existing one)", "copied"
	}
	return &cobra.Command{
		Use:     use + " SITE FROM TO",
		Short:   short,
		Example: fmt.Sprintf("  sandboxctl sites files %s site_abc wp-content/themes/a wp-content/themes/b", use),
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := sitesFileOp(e, args[0], op, nil, nil, "from", args[1], "to", args[2])
			if err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) { fmt.Fprintf(e.stdout, "%s %s to %s\n", verb, r.Str("from"), r.Str("to")) })
		},
	}
}
