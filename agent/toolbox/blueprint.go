package toolbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/agent/sites"
)

// Blueprint steps run inside the site's container as the site's user:
// conf/blueprint/run.php (root-owned, mounted read-only) reads one step
// on stdin and answers one JSON object. The stdin is a JSON header line
// (StepRequest) followed by the blobs it lists, back to back.

// StepRequest is one Blueprint step for the runner: the step's properties
// with every resource replaced by a reference ({"$file": i, "name"},
// {"$dir": {"name", "files": {path: i}}}, {"$vfs": path}) and the blobs
// those refer to.
type StepRequest struct {
	Step string         `json:"step"`
	Args map[string]any `json:"args"`
	// Attachments are the files an importWxr step's attachment URLs were
	// fetched into (URL → blob index); an attachment missing here is
	// imported without its file, and the log says so.
	Attachments map[string]int `json:"attachments,omitempty"`
	// Fetched are the files a wp-cli command's plugin, theme or media
	// arguments were fetched into (argument → {"$file": i, "name"}).
	Fetched map[string]any `json:"fetched,omitempty"`
	// LanguagePacks are a setSiteLanguage step's translation ZIPs.
	LanguagePacks []LanguagePack `json:"languagePacks,omitempty"`
	// Blobs are the bytes the references point at.
	Blobs [][]byte `json:"-"`
}

// LanguagePack is one translation ZIP: core, or a plugin's or theme's.
type LanguagePack struct {
	Type string `json:"type"`
	File int    `json:"$file"`
	Name string `json:"name"`
}

// StepResult is what a step did: its log, and for a login step the user
// it signs in as.
type StepResult struct {
	Log  string `json:"log"`
	User string `json:"user,omitempty"`
}

// StepError is a step that ran and failed: the runner's code and message.
type StepError struct {
	Code, Message, Log string
}

func (e *StepError) Error() string { return e.Message }

// maxStepLog bounds the log of one step.
const maxStepLog = 64 << 10

// MaxStepInput bounds what one step sends into a site (its resources): what one agent request carries (rpclimit.AgentRequest) less room for its envelope.
const MaxStepInput = 64 << 20

// debugConsts are the constants the site's debug settings own: a
// defineWpConfigConsts step sets them through those settings.
var debugConsts = map[string]func(*DebugPatch, *bool){
	"WP_DEBUG":         func(p *DebugPatch, v *bool) { p.WPDebug = v },
	"WP_DEBUG_LOG":     func(p *DebugPatch, v *bool) { p.WPDebugLog = v },
	"WP_DEBUG_DISPLAY": func(p *DebugPatch, v *bool) { p.WPDebugDisplay = v },
	"SCRIPT_DEBUG":     func(p *DebugPatch, v *bool) { p.ScriptDebug = v },
}

// RunBlueprintStep runs one step in the site. A step that ran and failed
// is a *StepError; any other error is the agent's.
func (b *Box) RunBlueprintStep(ctx context.Context, id string, req StepRequest) (*StepResult, error) {
	s := b.sites.Get(id)
	if s == nil {
		return nil, sites.ErrNotFound
	}
	var total int64
	for _, b := range req.Blobs {
		total += int64(len(b))
	}
	if total > MaxStepInput {
		return nil, fmt.Errorf("%w: the step's resources are %d bytes; at most %d", sites.ErrInvalid, total, MaxStepInput)
	}
	if err := b.sites.CheckDisk(id, total); err != nil {
		return nil, err
	}
	var debugLog []string
	if req.Step == "defineWpConfigConsts" {
		var err error
		if req.Args, debugLog, err = b.applyDebugConsts(id, req.Args); err != nil {
			return nil, err
		}
	}
	sizes := make([]int, len(req.Blobs))
	for i, b := range req.Blobs {
		sizes[i] = len(b)
	}
	head, err := json.Marshal(struct {
		StepRequest
		Blobs     []int  `json:"blobs"`
		URL       string `json:"url"`
		AdminUser string `json:"adminUser"`
		Port      int    `json:"port"`
	}{req, sizes, s.URL, s.AdminUser, sites.Port})
	if err != nil {
		return nil, err
	}
	in := bytes.NewBuffer(make([]byte, 0, len(head)+1+int(total)))
	in.Write(head)
	in.WriteByte('\n')
	for _, b := range req.Blobs {
		in.Write(b)
	}
	res, err := b.sites.Exec(ctx, id, []string{"php", "-d", "display_errors=stderr", "-d", "memory_limit=512M",
		"/srv/site/conf/blueprint/run.php"}, in.Bytes())
	if err != nil {
		return nil, err
	}
	var out struct {
		OK    bool   `json:"ok"`
		Log   string `json:"log"`
		User  string `json:"user"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if jerr := json.Unmarshal(res.Stdout, &out); jerr != nil || (!out.OK && out.Error == nil) {
		// The runner died (a fatal error, the memory limit, a kill):
		// what it printed last says why.
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = strings.TrimSpace(string(res.Stdout))
		}
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		return nil, &StepError{Code: "runner_failed", Message: fmt.Sprintf("the step stopped (exit %d): %s", res.ExitCode, msg), Log: msg}
	}
	// run.php keeps its log short; what answers is the site's, so the
	// agent bounds it again.
	if len(out.Log) > maxStepLog {
		out.Log = out.Log[:maxStepLog] + "\n… (cut)\n"
	}
	log := strings.Join(append(debugLog, out.Log), "")
	if out.Error != nil {
		if out.Error.Code == "disk_full" {
			return nil, b.sites.DiskFullError(id)
		}
		if out.Error.Code == "sql_error" && b.sites.DBLimited(id) {
			// The site is over its plan: the guard took its database's
			// writes away, which is why the statement failed.
			return nil, fmt.Errorf("%w; the step: %s", b.sites.DiskFullError(id), out.Error.Message)
		}
		return nil, &StepError{Code: out.Error.Code, Message: out.Error.Message, Log: log}
	}
	return &StepResult{Log: log, User: out.User}, nil
}

// applyDebugConsts takes the debug constants out of a
// defineWpConfigConsts step and sets them as the site's debug settings.
func (b *Box) applyDebugConsts(id string, args map[string]any) (map[string]any, []string, error) {
	consts, _ := args["consts"].(map[string]any)
	var p DebugPatch
	var log []string
	rest := map[string]any{}
	for k, v := range consts {
		set, ok := debugConsts[k]
		if !ok {
			rest[k] = v
			continue
		}
		b, isBool := v.(bool)
		if !isBool {
			return nil, nil, &StepError{Code: "invalid_value", Message: k + " must be true or false"}
		}
		set(&p, &b)
		log = append(log, fmt.Sprintf("%s set to %t (the site's debug settings)\n", k, b))
	}
	if len(log) > 0 {
		if _, err := b.SetDebug(id, p); err != nil {
			return nil, nil, err
		}
	}
	out := map[string]any{}
	for k, v := range args {
		out[k] = v
	}
	out["consts"] = rest
	return out, log, nil
}

// IsStepError reports whether err is a step that ran and failed.
func IsStepError(err error) bool {
	var se *StepError
	return errors.As(err, &se)
}
