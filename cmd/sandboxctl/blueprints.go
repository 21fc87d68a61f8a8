package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, blueprintsCmd) }

// bpPath is the workspace's saved Blueprints.
const bpPath = "/api/app/blueprints"

func blueprintsCmd(e *env) *cobra.Command {
	g := group("blueprints", "Blueprints: check, save and run them", `  sandboxctl blueprints validate blueprint.json
  sandboxctl blueprints save blueprint.json --name "Shop demo"
  sandboxctl blueprints run bp_abc --watch`,
		blueprintsValidate(e), blueprintsList(e), blueprintsGet(e), blueprintsSave(e), blueprintsUpdate(e),
		blueprintsImport(e), blueprintsUpload(e), blueprintsDelete(e),
		blueprintsRun(e), blueprintsApply(e), blueprintsBake(e), blueprintsRuns(e), blueprintsWatch(e))
	g.Long = `A Blueprint is a WordPress Playground Blueprint (JSON): a recipe of steps
that builds a site. Check one before saving it (validate), save it in the
workspace (save, upload), then make a site from it (run), run it on a site
you have (apply) or bake it into a template (bake), and follow its steps
(watch).`
	return g
}

func blueprintsList(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "The workspace's saved Blueprints", Args: cobra.NoArgs,
		Example: "  sandboxctl blueprints list\n  sandboxctl blueprints list --json | jq -r '.blueprints[].id'",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", bpPath, nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, b := range r.List("blueprints") {
					findings, _ := b["compatReport"].([]any)
					rows = append(rows, []string{str(b["id"]), clip(str(b["name"]), 28), str(b["revision"]),
						bpShort(bpMaps(findings)), ago(b["updatedAt"])})
				}
				e.table([]string{"ID", "NAME", "REV", "REPORT", "UPDATED"}, rows)
			})
		},
	}
}

func blueprintsGet(e *env) *cobra.Command {
	var source bool
	c := &cobra.Command{
		Use: "get BLUEPRINT", Short: "One saved Blueprint: its fields and report, or its source", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl blueprints get bp_abc\n  sandboxctl blueprints get bp_abc --source > blueprint.json",
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := e.api("GET", apiPath(bpPath, args[0]), nil)
			if err != nil {
				return err
			}
			if source {
				return bpWriteJSON(e.stdout, bpRaw(r, "blueprint", "sourceJson"))
			}
			return e.reply(r, func(r *apiclient.Response) { bpPrint(e, r, "") })
		},
	}
	c.Flags().BoolVar(&source, "source", false, "print only the Blueprint's JSON source")
	return c
}

// bpPrint shows a Blueprint answer ({blueprint}): its fields, then its
// compatibility report. note, when set, is printed first.
func bpPrint(e *env, r *apiclient.Response, note string) {
	if note != "" {
		fmt.Fprintln(e.stdout, note)
	}
	bundle := "-"
	if n, _ := r.Get("blueprint.bundleSizeBytes").(float64); n > 0 {
		bundle = fmt.Sprintf("%d bytes", int64(n))
		if d := r.Str("blueprint.bundleManifestDirectory"); d != "" {
			bundle += ", in " + d + "/"
		}
	}
	findings := r.List("blueprint.compatReport")
	e.fields([][2]string{
		{"id", orElse(r.Str("blueprint.id"), "-")}, {"name", clip(r.Str("blueprint.name"), 60)},
		{"description", orElse(clip(strings.Join(strings.Fields(r.Str("blueprint.description")), " "), 60), "-")},
		{"revision", str(r.Get("blueprint.revision"))}, {"php", orElse(r.Str("blueprint.hoistedPhpVersion"), "-")},
		{"wordpress", orElse(r.Str("blueprint.hoistedWordpressVersion"), "-")}, {"multisite", str(r.Get("blueprint.hoistedMultisite"))},
		{"bundle", bundle}, {"updated", ago(r.Get("blueprint.updatedAt"))}, {"report", bpSummary(findings)},
	})
	if len(findings) > 0 {
		fmt.Fprintln(e.stdout)
		bpFindings(e.stdout, bpRaw(r, "blueprint", "sourceJson"), findings, e.colorOut())
	}
}

func blueprintsSave(e *env) *cobra.Command {
	var name, description string
	c := &cobra.Command{
		Use:   "save FILE|-",
		Short: "Save a Blueprint (prints its id and compatibility report)",
		Long: `save keeps a Blueprint in the workspace with its compatibility report. One
with error findings is saved too, but cannot run until they are fixed
(blueprints update). The name defaults to the source's meta.title, then to
the file's name.`,
		Example: "  sandboxctl blueprints save blueprint.json --name \"Shop demo\"\n" +
			"  curl -s https://example.com/bp.json | sandboxctl blueprints save - --name Shop --json | jq -r .blueprint.id",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := bpReadSource(e, args[0])
			if err != nil {
				return err
			}
			if name == "" {
				name = bpDefaultName(src, args[0])
			}
			if name == "" {
				return usageError{errors.New("give the Blueprint a --name (its source has no meta.title)")}
			}
			body := map[string]any{"name": name, "source": json.RawMessage(src)}
			if description != "" {
				body["description"] = description
			}
			return e.send("POST", bpPath, body, func(r *apiclient.Response) {
				bpPrint(e, r, fmt.Sprintf("saved %s (%s)", r.Str("blueprint.id"), r.Str("blueprint.name")))
				bpRunsHere(e, r)
			}, "Idempotency-Key", e.idempotencyKey())
		},
	}
	c.Flags().StringVar(&name, "name", "", "name (default: meta.title, or the file's name)")
	c.Flags().StringVar(&description, "description", "", "description")
	return c
}

// bpRunsHere tells whether a saved Blueprint can run, from its report.
func bpRunsHere(e *env, r *apiclient.Response) {
	if n, _, _ := bpCount(r.List("blueprint.compatReport")); n > 0 {
		fmt.Fprintf(e.stdout, "it cannot run until its errors are fixed: sandboxctl blueprints update %s FILE\n", r.Str("blueprint.id"))
	}
}

func blueprintsUpdate(e *env) *cobra.Command {
	var name, description string
	c := &cobra.Command{
		Use:   "update BLUEPRINT [FILE|-]",
		Short: "Replace a saved Blueprint's source, or rename it",
		Example: "  sandboxctl blueprints update bp_abc blueprint.json\n" +
			"  sandboxctl blueprints update bp_abc --name \"Shop demo v2\" --description \"with the theme\"",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if len(args) == 2 {
				src, err := bpReadSource(e, args[1])
				if err != nil {
					return err
				}
				body["source"] = json.RawMessage(src)
			}
			if cmd.Flags().Changed("name") {
				body["name"] = name
			}
			if cmd.Flags().Changed("description") {
				body["description"] = description
			}
			if len(body) == 0 {
				return usageError{errors.New("nothing to change: give a FILE, --name or --description")}
			}
			return e.send("PATCH", apiPath(bpPath, args[0]), body, func(r *apiclient.Response) {
				bpPrint(e, r, fmt.Sprintf("updated %s (revision %s)", r.Str("blueprint.id"), str(r.Get("blueprint.revision"))))
				bpRunsHere(e, r)
			})
		},
	}
	c.Flags().StringVar(&name, "name", "", "new name")
	c.Flags().StringVar(&description, "description", "", "new description")
	return c
}

func blueprintsImport(e *env) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "import URL",
		Short: "Fetch a Blueprint's JSON from a URL (nothing is saved)",
		Long: `import has the server fetch a Blueprint's JSON (a code host's page URL of
the file is fetched raw) and prints it, or writes it to a file with -o.
ZIP bundles are uploaded instead: blueprints upload.`,
		Example: "  sandboxctl blueprints import https://github.com/WordPress/blueprints/blob/trunk/blueprints/tt5-demo/blueprint.json -o tt5.json\n" +
			"  sandboxctl blueprints import https://example.com/blueprint.json | sandboxctl blueprints save - --name Demo",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := e.api("POST", bpPath+"/import", map[string]string{"url": args[0]})
			if err != nil {
				return err
			}
			if out != "" {
				if err := os.WriteFile(out, []byte(strings.TrimRight(r.Str("source"), "\n")+"\n"), 0o644); err != nil {
					return fmt.Errorf("write the Blueprint: %w", err)
				}
			}
			switch {
			case e.json:
				return e.printJSON(r)
			case out != "":
				fmt.Fprintf(e.stdout, "wrote %s (from %s)\n", out, r.Str("sourceUrl"))
			default:
				fmt.Fprintln(e.stdout, strings.TrimRight(r.Str("source"), "\n"))
			}
			return nil
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "write the Blueprint to this file")
	return c
}

func blueprintsUpload(e *env) *cobra.Command {
	var preview, accept bool
	var name, description string
	c := &cobra.Command{
		Use:   "upload BUNDLE.zip|URL",
		Short: "Save a Blueprint bundle (a ZIP: blueprint.json and its files)",
		Long: `upload sends a ZIP (up to 64 MiB) holding one blueprint.json and the files
its bundled resources name, or has the server fetch one from an http(s)
URL. --preview shows what a save would do (the report and the changes the
source needs) without saving. Changes that need review are applied only
with --accept-adaptations.`,
		Example: "  sandboxctl blueprints upload shop.zip --preview\n" +
			"  sandboxctl blueprints upload shop.zip --accept-adaptations --name Shop\n" +
			"  sandboxctl blueprints upload https://example.com/shop.zip",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			fields := map[string]string{"name": name, "description": description}
			if accept {
				fields["adaptationsAccepted"] = "true"
			}
			if strings.HasPrefix(args[0], "https://") || strings.HasPrefix(args[0], "http://") {
				fields["bundleUrl"] = args[0]
			} else {
				zip, err := os.ReadFile(args[0])
				if err != nil {
					return usageError{fmt.Errorf("read the bundle: %w", err)}
				}
				fw, err := mw.CreateFormFile("bundle", filepath.Base(args[0]))
				if err != nil {
					return fmt.Errorf("build the upload: %w", err)
				}
				fw.Write(zip) // a bytes.Buffer does not fail
			}
			for k, v := range fields {
				if v != "" {
					mw.WriteField(k, v)
				}
			}
			mw.Close()
			c, err := e.client()
			if err != nil {
				return err
			}
			path := bpPath + "/upload"
			if preview {
				path += "?preview=1"
			}
			// A large bundle on a slow link takes longer than the client's
			// usual 30 s.
			slow := *c
			slow.HTTP = &http.Client{Timeout: 15 * time.Minute, Transport: c.HTTP.Transport}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			r, err := slow.Call(ctx, "POST", path, buf.Bytes(), "Content-Type", mw.FormDataContentType(), "Idempotency-Key", e.idempotencyKey())
			if err != nil {
				return bpExplain(e, err)
			}
			return e.reply(r, func(r *apiclient.Response) {
				note := fmt.Sprintf("saved %s (%s)", r.Str("blueprint.id"), r.Str("blueprint.name"))
				if preview {
					note = "preview (nothing saved): " + r.Str("blueprint.name")
				}
				bpPrint(e, r, note)
				if changes := r.List("adapted.changes"); len(changes) > 0 {
					fmt.Fprintln(e.stdout, "\nchanges it needs to run here:")
					bpChanges(e.stdout, changes, e.colorOut())
				}
			})
		},
	}
	c.Flags().BoolVar(&preview, "preview", false, "show the report and the changes needed, save nothing")
	c.Flags().BoolVar(&accept, "accept-adaptations", false, "apply the changes that need review")
	c.Flags().StringVar(&name, "name", "", "name (default: meta.title)")
	c.Flags().StringVar(&description, "description", "", "description")
	return c
}

// bpExplain adds what the API's details say to a refusal: the findings
// that keep a Blueprint from running, or the changes it needs, are
// printed on stderr; a refusal for want of accepted changes names the
// flag that accepts them.
func bpExplain(e *env, err error) error {
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Details == nil {
		return err
	}
	if report := bpMaps(ae.Details["compatReport"]); len(report) > 0 {
		bpFindings(e.stderr, nil, report, false)
	}
	if changes := bpMaps(ae.Details["changes"]); len(changes) > 0 {
		bpChanges(e.stderr, changes, false)
	}
	if ae.Details["field"] == "adaptationsAccepted" {
		cp := *ae
		cp.Message = "the Blueprint runs here only with the changes above, which need review: upload again with --accept-adaptations"
		return &cp
	}
	return err
}

func blueprintsDelete(e *env) *cobra.Command {
	return example(deleteCmd(e, "delete BLUEPRINT", "Delete a saved Blueprint (templates baked from it stay)", bpPath+"/"),
		"  sandboxctl blueprints delete bp_abc")
}

// bpReadSource reads a Blueprint file ("-": stdin); one that is not a
// JSON object is a usage error that says where it goes wrong.
func bpReadSource(e *env, name string) ([]byte, error) {
	var src []byte
	var err error
	if name == "-" {
		src, err = io.ReadAll(e.stdin)
		name = "stdin"
	} else {
		src, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, usageError{fmt.Errorf("read the Blueprint: %w", err)}
	}
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	var v any
	if err := json.Unmarshal(src, &v); err != nil {
		return nil, usageError{fmt.Errorf("%s is not JSON: %s", name, bpJSONError(src, err))}
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, usageError{fmt.Errorf("%s is not a Blueprint: a Blueprint is a JSON object ({...})", name)}
	}
	return src, nil
}

// bpJSONError says where a JSON syntax error is, as a line and column.
func bpJSONError(src []byte, err error) string {
	var se *json.SyntaxError
	if len(bytes.TrimSpace(src)) == 0 {
		return "the file is empty"
	}
	if !errors.As(err, &se) {
		return err.Error()
	}
	// Offset counts the bytes read, the wrong one included.
	before := src[:min(max(int(se.Offset)-1, 0), len(src))]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d: %v", line, col, err)
}

// bpDefaultName is a Blueprint's meta.title, else its file's name
// without the extension ("" for stdin).
func bpDefaultName(src []byte, file string) string {
	var doc struct {
		Meta struct {
			Title string `json:"title"`
		} `json:"meta"`
	}
	if json.Unmarshal(src, &doc) == nil && strings.TrimSpace(doc.Meta.Title) != "" {
		return clip(strings.TrimSpace(doc.Meta.Title), 100)
	}
	if file == "-" {
		return ""
	}
	base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	if base == "blueprint" {
		// blueprint.json says nothing: its directory names it.
		if dir := filepath.Base(filepath.Dir(file)); dir != "." && dir != string(filepath.Separator) {
			base = dir
		}
	}
	return base
}

// bpRaw is the JSON under obj.field of an answer, as the API sent it.
func bpRaw(r *apiclient.Response, obj, field string) json.RawMessage {
	var doc, inner map[string]json.RawMessage
	if json.Unmarshal(r.Raw, &doc) != nil || json.Unmarshal(doc[obj], &inner) != nil {
		return nil
	}
	return inner[field]
}

// bpWriteJSON writes JSON indented, with a final newline, keeping its
// keys in their order and showing <, > and & as themselves (PHP code
// reads better as <?php than as \u003c?php).
func bpWriteJSON(w io.Writer, raw json.RawMessage) error {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return fmt.Errorf("print the source: %w", err)
	}
	_, err := w.Write(append(bpUnescapeHTML(out.Bytes()), '\n'))
	return err
}

// bpUnescapeHTML turns the escapes \u003c, \u003e and \u0026 that Go's
// encoder writes for <, > and & back into those characters; other
// escapes, and text that only looks like one (\\u003c), stay.
func bpUnescapeHTML(js []byte) []byte {
	out := make([]byte, 0, len(js))
	for i := 0; i < len(js); i++ {
		if js[i] != '\\' || i+1 >= len(js) {
			out = append(out, js[i])
			continue
		}
		if js[i+1] == 'u' && i+6 <= len(js) {
			switch string(js[i+2 : i+6]) {
			case "003c", "003C":
				out, i = append(out, '<'), i+5
				continue
			case "003e", "003E":
				out, i = append(out, '>'), i+5
				continue
			case "0026":
				out, i = append(out, '&'), i+5
				continue
			}
		}
		// Any other escape is copied whole, so its second byte (perhaps
		// a backslash) starts nothing.
		out, i = append(out, js[i], js[i+1]), i+1
	}
	return out
}
