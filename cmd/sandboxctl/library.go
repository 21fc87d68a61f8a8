package main

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, libraryCmd) }

const libPath = "/api/app/plugin-library"

func libraryCmd(e *env) *cobra.Command {
	key := group("license-key", "An entry's license key (read from stdin, never shown again)",
		"  sandboxctl library license-key set acme-pro < key.txt\n  sandboxctl library license-key clear acme-pro",
		libKeySet(e), libKeyClear(e))
	return group("library", "Plugin and theme ZIPs that any site installs by name",
		`  sandboxctl library add ./my-plugin.zip
  sandboxctl library add-github acme/widgets
  sandboxctl library list`,
		libList(e), libGet(e), libAdd(e), libAddGitHub(e), libRefresh(e), key, libDelete(e))
}

func libList(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "The workspace's Library entries", Args: cobra.NoArgs,
		Example: "  sandboxctl library list\n  sandboxctl library list --json | jq -r '.plugins[].slug'",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", libPath, nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, p := range r.List("plugins") {
					rows = append(rows, []string{str(p["id"]), wsctlText(p["slug"], 18), str(p["kind"]), wsctlText(p["version"], 8),
						libHint(p["licenseKeyHint"]), ago(p["updatedAt"])})
				}
				e.table([]string{"ID", "SLUG", "KIND", "VERSION", "LICENSE", "UPDATED"}, rows)
			})
		},
	}
}

// libHint is a license key hint short enough for a table: at most four
// bullets and the last four characters the API shows.
func libHint(v any) string {
	s, _ := v.(string)
	if s == "" {
		return "-"
	}
	r := []rune(strings.TrimLeft(s, "•"))
	bullets := len([]rune(s)) - len(r)
	return strings.Repeat("•", min(bullets, 4)) + string(r)
}

// libPrint shows the entry of a {plugin} answer; verb, when set, says
// what was done to it first ("added acme-widgets").
func libPrint(e *env, r *apiclient.Response, verb string) {
	if verb != "" {
		fmt.Fprintf(e.stdout, "%s %s\n", verb, r.Str("plugin.slug"))
	}
	get := func(f string) any { return r.Get("plugin." + f) }
	rows := [][2]string{
		{"id", r.Str("plugin.id")}, {"slug", str(get("slug"))}, {"name", wsctlText(get("name"), 60)}, {"kind", str(get("kind"))},
		{"source", str(get("source"))},
	}
	if repo := r.Str("plugin.githubRepository"); repo != "" {
		rows = append(rows, [2]string{"repository", repo})
	}
	rows = append(rows, [][2]string{
		{"version", wsctlText(get("version"), 60)}, {"file", wsctlText(get("filename"), 60)}, {"size", jsonByteSize(get("sizeBytes"))},
		{"license key", libHint(get("licenseKeyHint"))},
	}...)
	if get("licenseKeyLastReadAt") != nil {
		rows = append(rows, [2]string{"key last read", ago(get("licenseKeyLastReadAt"))})
	}
	rows = append(rows, [2]string{"updated", ago(get("updatedAt"))})
	e.fields(rows)
}

func libGet(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "get ENTRY", Short: "One Library entry, by id or slug", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl library get acme-widgets\n  sandboxctl library get lib_abc --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("GET", apiPath(libPath, args[0]), nil, func(r *apiclient.Response) { libPrint(e, r, "") })
		},
	}
}

func libAdd(e *env) *cobra.Command {
	var keyStdin bool
	cmd := &cobra.Command{
		Use: "add FILE.zip", Short: "Upload a plugin or theme ZIP (its WordPress header names it)", Args: cobra.ExactArgs(1),
		Example: `  sandboxctl library add ./acme-widgets.zip
  sandboxctl library add ./acme-pro.zip --license-key-stdin < key.txt`,
		RunE: func(cmd *cobra.Command, args []string) error {
			zip, err := os.ReadFile(args[0])
			if err != nil {
				return usageError{fmt.Errorf("read the ZIP: %w", err)}
			}
			fields := map[string]string{}
			if keyStdin {
				if fields["licenseKey"], err = readSecret(e, "license key"); err != nil {
					return err
				}
			}
			body, ctype, err := libMultipart(filepath.Base(args[0]), zip, fields)
			if err != nil {
				return err
			}
			return e.send("POST", libPath, body, func(r *apiclient.Response) { libPrint(e, r, "added") },
				"Content-Type", ctype, "Idempotency-Key", e.idempotencyKey())
		},
	}
	cmd.Flags().BoolVar(&keyStdin, "license-key-stdin", false, "read a license key from stdin (kept sealed)")
	return cmd
}

// libMultipart is the upload body: the ZIP as part "file", then fields.
func libMultipart(filename string, zip []byte, fields map[string]string) ([]byte, string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			return nil, "", fmt.Errorf("build the upload: %w", err)
		}
	}
	w, err := mw.CreateFormFile("file", filename)
	if err != nil {
		return nil, "", fmt.Errorf("build the upload: %w", err)
	}
	if _, err := w.Write(zip); err != nil {
		return nil, "", fmt.Errorf("build the upload: %w", err)
	}
	if err := mw.Close(); err != nil {
		return nil, "", fmt.Errorf("build the upload: %w", err)
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}

func libAddGitHub(e *env) *cobra.Command {
	var keyStdin bool
	cmd := &cobra.Command{
		Use: "add-github OWNER/REPO", Short: "Add a repository's latest release ZIP (refresh fetches newer ones)", Args: cobra.ExactArgs(1),
		Example: `  sandboxctl library add-github acme/widgets
  sandboxctl library add-github acme/pro --license-key-stdin < key.txt`,
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"repository": args[0]}
			if keyStdin {
				key, err := readSecret(e, "license key")
				if err != nil {
					return err
				}
				body["licenseKey"] = key
			}
			return e.send("POST", libPath+"/github", body, func(r *apiclient.Response) { libPrint(e, r, "added") },
				"Idempotency-Key", e.idempotencyKey())
		},
	}
	cmd.Flags().BoolVar(&keyStdin, "license-key-stdin", false, "read a license key from stdin (kept sealed)")
	return cmd
}

func libRefresh(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "refresh ENTRY", Short: "Fetch a repository entry's latest release", Args: cobra.ExactArgs(1),
		Long:    "Fetch a repository entry's latest release; the held ZIP is replaced\nwhen its tag changed.",
		Example: "  sandboxctl library refresh acme-widgets",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("POST", apiPath(libPath, args[0], "refresh"), nil, func(r *apiclient.Response) {
				if up, _ := r.Get("updated").(bool); up {
					fmt.Fprintf(e.stdout, "%s updated to %s\n", r.Str("plugin.slug"), r.Str("plugin.version"))
					return
				}
				fmt.Fprintf(e.stdout, "%s is the latest release already (%s)\n", r.Str("plugin.slug"), r.Str("plugin.version"))
			})
		},
	}
}

func libKeySet(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "set ENTRY", Short: "Set an entry's license key, read from stdin",
		Long: `Set an entry's license key, read from the first line of stdin: never from an
argument, which shell history would keep. It is stored sealed; only a hint
(the last four characters) is ever shown.`,
		Args:    cobra.ExactArgs(1),
		Example: "  sandboxctl library license-key set acme-pro < key.txt\n  pass show acme | sandboxctl library license-key set acme-pro",
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := readSecret(e, "license key")
			if err != nil {
				return err
			}
			return e.send("PUT", apiPath(libPath, args[0], "license-key"), map[string]string{"licenseKey": key},
				func(r *apiclient.Response) {
					fmt.Fprintf(e.stdout, "license key of %s set (%s)\n", r.Str("plugin.slug"), libHint(r.Get("plugin.licenseKeyHint")))
				})
		},
	}
}

func libKeyClear(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "clear ENTRY", Short: "Remove an entry's license key", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl library license-key clear acme-pro",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("DELETE", apiPath(libPath, args[0], "license-key"), nil, func(r *apiclient.Response) {
				fmt.Fprintf(e.stdout, "license key of %s removed\n", r.Str("plugin.slug"))
			})
		},
	}
}

func libDelete(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "delete ENTRY", Short: "Delete a Library entry and its ZIP", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl library delete acme-widgets",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("DELETE", apiPath(libPath, args[0]), nil, func(*apiclient.Response) {
				fmt.Fprintf(e.stdout, "deleted library entry %s\n", args[0])
			})
		},
	}
}
