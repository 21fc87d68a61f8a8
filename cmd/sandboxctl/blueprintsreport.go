package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func blueprintsValidate(e *env) *cobra.Command {
	var adapt bool
	var out string
	c := &cobra.Command{
		Use:   "validate FILE|-",
		Short: "Check a Blueprint file: its compatibility report, nothing saved",
		Long: `validate sends a Blueprint to the server, which checks it against what this
service can run and answers with its compatibility report: errors (what
keeps it from running here), warnings (what runs differently) and notes.
Nothing is saved. It needs no login: without a token the server comes
from --server, SANDBOX_URL or the profile; with one, the workspace's
Library counts too.

--adapt also asks for a source that runs here: the changes made to get it
are listed and the adapted source is printed (or written to -o FILE).

Exit codes: 0 when the Blueprint runs here (with --adapt: when the adapted
source does); 1 when the server says it cannot (the report lists the
errors, the verdict is on stderr) or refused the request; 2 when FILE
cannot be read or is not a JSON object.`,
		Example: `  sandboxctl blueprints validate blueprint.json
  sandboxctl blueprints validate blueprint.json --adapt -o adapted.json
  sandboxctl --server https://sandbox.example.com blueprints validate - < blueprint.json
  sandboxctl blueprints validate blueprint.json --json | jq '.compatReport[] | select(.severity == "error")'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out != "" && !adapt {
				return usageError{errors.New("-o writes the adapted source: give --adapt too")}
			}
			src, err := bpReadSource(e, args[0])
			if err != nil {
				return err
			}
			c, err := bpAnyClient(e)
			if err != nil {
				return err
			}
			body := map[string]any{"source": json.RawMessage(src)}
			if adapt {
				body["adapt"] = true
			}
			r, err := call(c, "POST", "/api/app/blueprints/validate", body)
			if err != nil {
				return err
			}
			name := args[0]
			if name == "-" {
				name = "stdin"
			}
			return bpValidated(e, r, src, name, adapt, out)
		},
	}
	c.Flags().BoolVar(&adapt, "adapt", false, "also get a source that runs here, and the changes made to it")
	c.Flags().StringVarP(&out, "output", "o", "", "with --adapt: write the adapted source to this file")
	return c
}

// bpValidated shows a validation's answer and turns a Blueprint that
// cannot run into an error (exit 1).
func bpValidated(e *env, r *apiclient.Response, src []byte, name string, adapt bool, out string) error {
	valid, _ := r.Get("valid").(bool)
	runs := valid
	adapted := bpRaw(r, "adapted", "source")
	if adapt {
		runs, _ = r.Get("adapted.valid").(bool)
		if out != "" && len(adapted) > 0 {
			f, err := os.Create(out)
			if err != nil {
				return fmt.Errorf("write the adapted source: %w", err)
			}
			werr := bpWriteJSON(f, adapted)
			if err := f.Close(); werr == nil {
				werr = err
			}
			if werr != nil {
				return fmt.Errorf("write the adapted source: %w", werr)
			}
		}
	}
	findings := r.List("compatReport")
	errs, _, _ := bpCount(findings)
	if e.json {
		if err := e.printJSON(r); err != nil {
			return err
		}
	} else {
		color := e.colorOut()
		if len(findings) > 0 {
			bpFindings(e.stdout, src, findings, color)
		}
		if adapt {
			changes := r.List("adapted.changes")
			if len(changes) == 0 {
				fmt.Fprintln(e.stdout, "adapting changed nothing")
			} else {
				fmt.Fprintln(e.stdout, "\nchanges made to run here:")
				bpChanges(e.stdout, changes, color)
			}
			if out != "" {
				fmt.Fprintf(e.stdout, "wrote the adapted source to %s\n", out)
			} else if len(adapted) > 0 {
				fmt.Fprintln(e.stdout, "\nadapted source:")
				if err := bpWriteJSON(e.stdout, adapted); err != nil {
					return err
				}
			}
		}
		if runs {
			verdict := "runs here"
			if !valid {
				verdict = "runs here once adapted"
			}
			if s := bpSummary(findings); s != "no findings" {
				verdict += " (" + s + ")"
			}
			fmt.Fprintf(e.stdout, "%s: %s\n", name, verdict)
		}
	}
	switch {
	case runs:
		return nil
	case adapt && valid:
		return fmt.Errorf("%s runs here as it is, but its adapted source does not", name)
	case adapt:
		return fmt.Errorf("%s cannot run here, even adapted (its errors are in the report)", name)
	}
	return fmt.Errorf("%s cannot run here as it is: %s (see the report)", name, bpPlural(errs, "error"))
}

// bpAnyClient is the invocation's client, with a token when there is
// one; without, a client of the server alone (for what needs no login).
func bpAnyClient(e *env) (*apiclient.Client, error) {
	c, err := e.client()
	var ue usageError
	if err == nil || !errors.As(err, &ue) {
		return c, err
	}
	cfg, name, cerr := e.profileConfig()
	if cerr != nil {
		return nil, cerr
	}
	p := cfg.Profiles[name]
	if e.profile != "" && p == nil {
		return nil, err
	}
	server := e.server
	if server == "" {
		server = os.Getenv("SANDBOX_URL")
	}
	if server == "" && p != nil {
		server = p.Server
	}
	if server == "" {
		return nil, usageError{errors.New("which server? give --server URL or set SANDBOX_URL (this needs no login)")}
	}
	return apiclient.New(server, ""), nil
}

// bpWidth is the width tables fit in.
const bpWidth = 80

var bpStepPath = regexp.MustCompile(`^steps\[(\d+)\]\.?(.*)$`)

// bpFindings writes a compatibility report: each finding's severity,
// step (its number and name, read from src when given) and message.
func bpFindings(w io.Writer, src []byte, findings []map[string]any, color bool) {
	names := bpStepNames(src)
	var rows [][]string
	for _, f := range findings {
		where, msg := str(f["path"]), str(f["message"])
		if m := bpStepPath.FindStringSubmatch(where); m != nil {
			i, _ := strconv.Atoi(m[1])
			where = "step " + strconv.Itoa(i+1)
			if i < len(names) && names[i] != "" {
				where += " " + names[i]
			}
			if m[2] != "" {
				msg = m[2] + ": " + msg
			}
		}
		if where == "" || where == "-" {
			where = "(whole)"
		}
		rows = append(rows, []string{str(f["severity"]), where, msg})
	}
	bpTable(w, []string{"SEVERITY", "STEP", "MESSAGE"}, rows, []int{8, 26}, func(col int, cell string) string {
		if col != 0 || !color {
			return cell
		}
		switch strings.TrimSpace(cell) {
		case "error":
			return paint(true, "31", cell)
		case "warning":
			return paint(true, "33", cell)
		}
		return paint(true, "2", cell)
	})
}

// bpChanges writes the changes an adaptation makes.
func bpChanges(w io.Writer, changes []map[string]any, color bool) {
	var rows [][]string
	for _, c := range changes {
		review := "no"
		if r, _ := c["reviewRequired"].(bool); r {
			review = "yes"
		}
		where := str(c["path"])
		if where == "" {
			where = "(whole)"
		}
		rows = append(rows, []string{where, review, str(c["message"])})
	}
	bpTable(w, []string{"WHERE", "REVIEW", "CHANGE"}, rows, []int{30, 6}, func(col int, cell string) string {
		if col == 1 && color && strings.TrimSpace(cell) == "yes" {
			return paint(true, "33", cell)
		}
		return cell
	})
}

// bpStepNames are the step names of a source, by index ("" where a
// step has none).
func bpStepNames(src []byte) []string {
	var doc struct {
		Steps []json.RawMessage `json:"steps"`
	}
	if len(src) == 0 || json.Unmarshal(src, &doc) != nil {
		return nil
	}
	names := make([]string, len(doc.Steps))
	for i, raw := range doc.Steps {
		var s struct {
			Step string `json:"step"`
		}
		if json.Unmarshal(raw, &s) == nil {
			names[i] = s.Step
		}
	}
	return names
}

// bpTable writes rows under a header so that every line fits bpWidth:
// every column but the last is at most maxw[i] wide (longer cells end in
// an ellipsis); the last wraps onto lines of its own. paintCell colours a
// padded cell of a row's first line.
func bpTable(w io.Writer, header []string, rows [][]string, maxw []int, paintCell func(col int, cell string) string) {
	n := len(header)
	widths := make([]int, n-1)
	for i := range widths {
		widths[i] = utf8.RuneCountInString(header[i])
		for _, r := range rows {
			widths[i] = min(maxw[i], max(widths[i], utf8.RuneCountInString(r[i])))
		}
	}
	last := bpWidth - 1
	for _, wd := range widths {
		last -= wd + 2
	}
	last = max(last, 20)
	pad := func(s string, wd int) string { return s + strings.Repeat(" ", wd-utf8.RuneCountInString(s)) }
	line := func(cells []string, lastCell string, painted bool) {
		var b strings.Builder
		for i, c := range cells {
			cell := pad(clip(c, widths[i]), widths[i])
			if painted {
				cell = paintCell(i, cell)
			}
			b.WriteString(cell + "  ")
		}
		fmt.Fprintln(w, strings.TrimRight(b.String()+lastCell, " "))
	}
	line(header[:n-1], header[n-1], false)
	blank := make([]string, n-1)
	for _, r := range rows {
		for i, l := range bpWrap(r[n-1], last) {
			if i == 0 {
				line(r[:n-1], l, true)
			} else {
				line(blank, l, false)
			}
		}
	}
}

// bpWrap breaks s into lines of at most n runes, between words when it
// can.
func bpWrap(s string, n int) []string {
	var lines []string
	cur := ""
	for _, word := range strings.Fields(s) {
		for utf8.RuneCountInString(word) > n {
			if cur != "" {
				lines, cur = append(lines, cur), ""
			}
			r := []rune(word)
			lines, word = append(lines, string(r[:n])), string(r[n:])
		}
		switch {
		case cur == "":
			cur = word
		case utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(word) <= n:
			cur += " " + word
		default:
			lines, cur = append(lines, cur), word
		}
	}
	if cur != "" || len(lines) == 0 {
		lines = append(lines, cur)
	}
	return lines
}

// bpCount counts a report's findings by severity.
func bpCount(findings []map[string]any) (errs, warns, infos int) {
	for _, f := range findings {
		switch f["severity"] {
		case "error":
			errs++
		case "warning":
			warns++
		default:
			infos++
		}
	}
	return errs, warns, infos
}

// bpSummary is a report in a few words: "2 errors, 1 warning".
func bpSummary(findings []map[string]any) string {
	errs, warns, infos := bpCount(findings)
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{errs, "error"}, {warns, "warning"}, {infos, "note"}} {
		if p.n > 0 {
			parts = append(parts, bpPlural(p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return "no findings"
	}
	return strings.Join(parts, ", ")
}

// bpShort is a report in a list's cell: what keeps it from running,
// else "ok" and its warnings.
func bpShort(findings []map[string]any) string {
	switch errs, warns, _ := bpCount(findings); {
	case errs > 0:
		return bpPlural(errs, "error")
	case warns > 0:
		return "ok, " + bpPlural(warns, "warning")
	}
	return "ok"
}

func bpPlural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// bpMaps is a JSON list of objects.
func bpMaps(v any) []map[string]any {
	raw, _ := v.([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, x := range raw {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
