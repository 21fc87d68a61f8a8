// Package blueprint reads WordPress Playground's Blueprint JSON (format
// v1): it checks a source against the whole format (every top-level
// property, every step of the catalogue, every resource type), expands
// the shorthands into steps, and reports what this service can and
// cannot run on its sandboxes as compatReport findings, with "did you
// mean" for near misses. Adapt rewrites a source into one that runs here
// and lists each change. It reads nothing from the network: what the
// fetcher can reach is asked of Env.
package blueprint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Env is what the compatibility checks need to know of this service.
type Env struct {
	// PHPVersions and WordPressVersions have images here, oldest first.
	PHPVersions       []string
	WordPressVersions []string
	// WordPressOf is the WordPress each PHP image carries.
	WordPressOf map[string]string
	// Reach says whether the resource fetcher can fetch a URL (mirror,
	// address guard); nil checks nothing.
	Reach func(rawURL string) error
	// Bundle is set when the source came in a bundle (bundled resources
	// resolve inside it); BundleFiles, when set, are its files, and a
	// bundled resource must name one of them.
	Bundle      bool
	BundleFiles map[string]int64
	// Library is the workspace's Library: "plugin:<slug>" or
	// "theme:<slug>" → version. A wordpress.org resource of a slug it
	// has is installed from it.
	Library map[string]string
}

// Step is one step to run, shorthands expanded: Path is where it came
// from in the source (steps[3], plugins[0], login, …).
type Step struct {
	Name string         `json:"step"`
	Args map[string]any `json:"args"`
	Path string         `json:"path"`
	// Caption is the step's progress.caption, when it has one.
	Caption string `json:"caption,omitempty"`
}

// Blueprint is a checked source, ready for the runner.
type Blueprint struct {
	LandingPage string
	// PHPVersion and WordPressVersion are as asked ("latest" or a
	// version; empty when not given).
	PHPVersion, WordPressVersion string
	Steps                        []Step
	// Multisite is set when a step asks for a multisite.
	Multisite bool
}

// Result is a source's check: the Blueprint (nil when it could not be
// read at all) and the findings; Valid when none is an error.
type Result struct {
	Blueprint *Blueprint
	Report    []Finding
	Valid     bool
}

// Check reads and checks a source.
func Check(src []byte, env Env) Result {
	var r report
	doc, err := decode(src)
	if err != nil {
		r.err("", CodeInvalidJSON, "%v", err)
		return Result{Report: r.items}
	}
	b := check(doc, env, &r)
	if r.items == nil {
		r.items = []Finding{}
	}
	return Result{Blueprint: b, Report: r.items, Valid: !HasErrors(r.items)}
}

// decode reads one JSON object, numbers kept exact.
func decode(src []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the source is not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the source has more than one JSON value")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the source must be a JSON object, not %s", jsonType(v))
	}
	return m, nil
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// maxSteps bounds a Blueprint's steps.
const maxSteps = 1000

// check walks a decoded source.
func check(doc map[string]any, env Env, r *report) *Blueprint {
	b := &Blueprint{}
	if v, ok := doc["version"]; ok {
		r.err("version", CodeUnsupportedVersion, "Blueprint format version %v is not supported; this service runs version 1 (no version property)", v)
		return b
	}
	for _, k := range keysOf(doc) {
		if !slices.Contains(topLevel, k) {
			r.err(k, CodeUnknownProperty, "unknown property %q%s", k, didYouMean(k, topLevel))
		}
	}
	str := func(p string, v any) (string, bool) {
		s, ok := v.(string)
		if !ok {
			r.err(p, CodeInvalidType, "%s must be a string, not %s", p, jsonType(v))
		}
		return s, ok
	}
	obj := func(p string, v any) (map[string]any, bool) {
		m, ok := v.(map[string]any)
		if !ok {
			r.err(p, CodeInvalidType, "%s must be an object, not %s", p, jsonType(v))
		}
		return m, ok
	}
	if v, ok := doc["landingPage"]; ok {
		if s, ok := str("landingPage", v); ok {
			if !strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//") {
				r.err("landingPage", CodeInvalidValue, "landingPage must be a path in the site starting with /")
			} else {
				b.LandingPage = s
			}
		}
	}
	if v, ok := doc["description"]; ok {
		str("description", v)
	}
	if v, ok := doc["$schema"]; ok {
		str("$schema", v)
	}
	if v, ok := doc["meta"]; ok {
		if m, ok := obj("meta", v); ok {
			checkMeta(m, r)
		}
	}
	if v, ok := doc["preferredVersions"]; ok {
		if m, ok := obj("preferredVersions", v); ok {
			b.PHPVersion, b.WordPressVersion = checkVersions(m, env, r)
		}
	}
	if v, ok := doc["features"]; ok {
		if m, ok := obj("features", v); ok {
			for _, k := range keysOf(m) {
				p := "features." + k
				if k != "intl" && k != "networking" {
					r.err(p, CodeUnknownProperty, "unknown feature %q%s", k, didYouMean(k, []string{"intl", "networking"}))
				} else if _, ok := m[k].(bool); !ok {
					r.err(p, CodeInvalidType, "%s must be a boolean", p)
				}
			}
		}
	}
	if v, ok := doc["extraLibraries"]; ok {
		if a, ok := v.([]any); !ok {
			r.err("extraLibraries", CodeInvalidType, "extraLibraries must be an array")
		} else {
			for i, x := range a {
				if x != "wp-cli" {
					r.err(fmt.Sprintf("extraLibraries[%d]", i), CodeInvalidValue, "the only extra library is \"wp-cli\"")
				}
			}
		}
	}
	if _, ok := doc["phpExtensionBundles"]; ok {
		r.add(SeverityWarning, "phpExtensionBundles", CodeDeprecated, "phpExtensionBundles is no longer used; adapt removes it")
	}

	// Shorthands, in the order Playground expands them: plugins, then
	// siteOptions, then constants, before the steps; login after them.
	if v, ok := doc["plugins"]; ok {
		if a, ok := v.([]any); !ok {
			r.err("plugins", CodeInvalidType, "plugins must be an array")
		} else {
			for i, x := range a {
				p := fmt.Sprintf("plugins[%d]", i)
				data := x
				if s, ok := x.(string); ok {
					data = map[string]any{"resource": "wordpress.org/plugins", "slug": s}
					var sub report
					checkResource(p, data, fileResource, env, &sub)
					for _, f := range sub.items { // the shorthand is the slug itself
						f.Path = p
						r.items = append(r.items, f)
					}
				} else {
					checkResource(p, data, fileResource, env, r)
				}
				b.Steps = append(b.Steps, Step{Name: "installPlugin", Path: p, Args: map[string]any{"pluginData": data}})
			}
		}
	}
	if v, ok := doc["siteOptions"]; ok {
		if m, ok := obj("siteOptions", v); ok {
			checkOptions("siteOptions", m, r)
			b.Steps = append(b.Steps, Step{Name: "setSiteOptions", Path: "siteOptions", Args: map[string]any{"options": m}})
		}
	}
	if v, ok := doc["constants"]; ok {
		if m, ok := obj("constants", v); ok {
			checkConstants("constants", m, r)
			b.Steps = append(b.Steps, Step{Name: "defineWpConfigConsts", Path: "constants", Args: map[string]any{"consts": m}})
		}
	}
	if v, ok := doc["steps"]; ok {
		if a, ok := v.([]any); !ok {
			r.err("steps", CodeInvalidType, "steps must be an array")
		} else {
			if len(a) > maxSteps {
				r.err("steps", CodeTooManySteps, "%d steps; a Blueprint has at most %d", len(a), maxSteps)
				a = a[:maxSteps]
			}
			for i, x := range a {
				p := fmt.Sprintf("steps[%d]", i)
				switch x := x.(type) {
				case map[string]any:
					if s, ok := checkStep(p, x, env, r); ok {
						b.Steps = append(b.Steps, s)
						if s.Name == "enableMultisite" {
							b.Multisite = true
						}
					}
				case nil, bool, string:
					if x == true {
						r.err(p, CodeInvalidType, "a step must be an object")
						continue
					}
					r.add(SeverityInfo, p, CodeIgnoredStep, "%s is %s, not a step: skipped", p, jsonType(x))
				default:
					r.err(p, CodeInvalidType, "a step must be an object, not %s", jsonType(x))
				}
			}
		}
	}
	if v, ok := doc["login"]; ok {
		switch x := v.(type) {
		case bool:
			if x {
				b.Steps = append(b.Steps, Step{Name: "login", Path: "login", Args: map[string]any{"username": "admin"}})
			}
		case map[string]any:
			for _, k := range keysOf(x) {
				if k != "username" && k != "password" {
					r.err("login."+k, CodeUnknownProperty, "unknown property %q%s", k, didYouMean(k, []string{"username", "password"}))
				}
			}
			for _, k := range []string{"username", "password"} {
				if _, ok := x[k]; !ok {
					r.err("login", CodeMissingProperty, "login needs %s", k)
				} else {
					str("login."+k, x[k])
				}
			}
			b.Steps = append(b.Steps, Step{Name: "login", Path: "login", Args: x})
		default:
			r.err("login", CodeInvalidType, "login must be a boolean or {username, password}")
		}
	}
	return b
}

func checkMeta(m map[string]any, r *report) {
	known := []string{"title", "description", "author", "categories"}
	for _, k := range keysOf(m) {
		p := "meta." + k
		switch k {
		case "title", "description", "author":
			if _, ok := m[k].(string); !ok {
				r.err(p, CodeInvalidType, "%s must be a string", p)
			}
		case "categories":
			a, ok := m[k].([]any)
			if !ok {
				r.err(p, CodeInvalidType, "%s must be an array of strings", p)
				continue
			}
			for i, x := range a {
				if _, ok := x.(string); !ok {
					r.err(fmt.Sprintf("%s[%d]", p, i), CodeInvalidType, "a category must be a string")
				}
			}
		default:
			r.err(p, CodeUnknownProperty, "unknown property %q%s", k, didYouMean(k, known))
		}
	}
	for _, k := range []string{"title", "author"} {
		if _, ok := m[k]; !ok {
			r.err("meta", CodeMissingProperty, "meta needs %s", k)
		}
	}
}

// checkOptions checks a map of WordPress options: string values.
func checkOptions(p string, m map[string]any, r *report) {
	for _, k := range keysOf(m) {
		if _, ok := m[k].(string); !ok {
			r.err(p+"."+k, CodeInvalidType, "option %s must be a string, not %s (adapt writes it as one)", k, jsonType(m[k]))
		}
	}
}

// checkConstants checks wp-config constants: scalar values.
func checkConstants(p string, m map[string]any, r *report) {
	for _, k := range keysOf(m) {
		switch m[k].(type) {
		case string, bool, json.Number:
		default:
			r.err(p+"."+k, CodeInvalidType, "constant %s must be a string, number or boolean", k)
		}
		if !constName(k) {
			r.err(p+"."+k, CodeInvalidValue, "%q is not a PHP constant name", k)
		}
	}
}

func constName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// checkStep checks one step object against the catalogue.
func checkStep(p string, m map[string]any, env Env, r *report) (Step, bool) {
	raw, ok := m["step"]
	if !ok {
		r.err(p, CodeMissingProperty, "%s has no step name (property \"step\")", p)
		return Step{}, false
	}
	name, ok := raw.(string)
	if !ok {
		r.err(p+".step", CodeInvalidType, "the step name must be a string")
		return Step{}, false
	}
	spec, known := steps[name]
	if !known {
		r.err(p+".step", CodeUnknownStep, "unknown step %q%s", name, didYouMean(name, keysOf(steps)))
		return Step{}, false
	}
	args := map[string]any{}
	for _, k := range keysOf(m) {
		switch {
		case k == "step":
		case k == "progress":
			checkProgress(p+".progress", m[k], r)
		case slices.Contains(spec.keys, k):
			args[k] = m[k]
		default:
			r.err(p+"."+k, CodeUnknownProperty, "%s takes no property %q%s", name, k, didYouMean(k, spec.keys))
		}
	}
	for _, k := range spec.required {
		if _, ok := m[k]; ok {
			continue
		}
		if old := oldNameOf(spec, k); old != "" && m[old] != nil {
			continue // the deprecated name stands in for it
		}
		r.err(p, CodeMissingProperty, "%s needs %q", name, k)
	}
	for old, cur := range spec.deprecated {
		if _, ok := m[old]; ok {
			r.add(SeverityWarning, p+"."+old, CodeDeprecated, "%s is deprecated; use %s (adapt renames it)", old, cur)
		}
	}
	for _, k := range keysOf(spec.resources) {
		if v, ok := m[k]; ok {
			if k == "code" || k == "sql" {
				if _, isText := v.(string); isText {
					continue // inline code or SQL
				}
			}
			if k == "data" {
				if _, isText := v.(string); isText {
					continue // inline file contents
				}
			}
			checkResource(p+"."+k, v, spec.resources[k], env, r)
		}
	}
	if spec.unsupported != "" {
		r.err(p, CodeUnsupportedStep, "%s cannot run here: %s", name, spec.unsupported)
	}
	checkStepValues(p, name, m, r)
	caption := ""
	if pr, ok := m["progress"].(map[string]any); ok {
		caption, _ = pr["caption"].(string)
	}
	return Step{Name: name, Args: args, Path: p, Caption: caption}, true
}

func oldNameOf(spec stepSpec, cur string) string {
	for old, c := range spec.deprecated {
		if c == cur {
			return old
		}
	}
	return ""
}

func checkProgress(p string, v any, r *report) {
	m, ok := v.(map[string]any)
	if !ok {
		r.err(p, CodeInvalidType, "progress must be an object")
		return
	}
	for _, k := range keysOf(m) {
		switch k {
		case "weight":
			if _, ok := m[k].(json.Number); !ok {
				r.err(p+".weight", CodeInvalidType, "progress.weight must be a number")
			}
		case "caption":
			if _, ok := m[k].(string); !ok {
				r.err(p+".caption", CodeInvalidType, "progress.caption must be a string")
			}
		default:
			r.err(p+"."+k, CodeUnknownProperty, "progress takes no property %q", k)
		}
	}
}

// sitePathKeys are step properties that name a path in the site.
var sitePathKeys = []string{"path", "fromPath", "toPath", "extractToPath", "writeToPath"}

// checkStepValues checks what a step's properties hold beyond their
// presence: site paths inside /wordpress, strings where strings go,
// wp-cli commands the runner does.
func checkStepValues(p, name string, m map[string]any, r *report) {
	for _, k := range sitePathKeys {
		v, ok := m[k]
		if !ok {
			continue
		}
		s, ok := v.(string)
		if !ok {
			r.err(p+"."+k, CodeInvalidType, "%s must be a string", k)
			continue
		}
		if !InSite(s) {
			r.err(p+"."+k, CodePathOutsideSite, "%s %q is outside the site (/wordpress)", k, s)
		}
	}
	switch name {
	case "wp-cli":
		checkWPCLI(p+".command", m["command"], r)
	case "setSiteOptions", "runWpInstallationWizard":
		// The step takes any JSON value (WordPress stores arrays and
		// objects serialized); the siteOptions shorthand takes strings.
		if _, ok := m["options"].(map[string]any); !ok && m["options"] != nil {
			r.err(p+".options", CodeInvalidType, "options must be an object")
		}
	case "defineWpConfigConsts":
		if c, ok := m["consts"].(map[string]any); ok {
			for _, k := range keysOf(c) {
				if !constName(k) {
					r.err(p+".consts."+k, CodeInvalidValue, "%q is not a PHP constant name", k)
				} else if slices.Contains(reservedConsts, k) {
					r.err(p+".consts."+k, CodeReservedConstant, "%s is set by the service and cannot be changed", k)
				}
			}
		} else if m["consts"] != nil {
			r.err(p+".consts", CodeInvalidType, "consts must be an object")
		}
		if v, ok := m["method"]; ok && v != "rewrite-wp-config" && v != "define-before-run" {
			r.err(p+".method", CodeInvalidValue, "method must be rewrite-wp-config or define-before-run")
		}
	case "updateUserMeta":
		if _, ok := m["meta"].(map[string]any); !ok && m["meta"] != nil {
			r.err(p+".meta", CodeInvalidType, "meta must be an object")
		}
		if _, ok := m["userId"].(json.Number); !ok && m["userId"] != nil {
			r.err(p+".userId", CodeInvalidType, "userId must be a number")
		}
	case "activatePlugin", "activateTheme", "setSiteLanguage", "defineSiteUrl":
		for _, k := range []string{"pluginPath", "pluginName", "themeFolderName", "language", "siteUrl"} {
			if v, ok := m[k]; ok {
				if _, ok := v.(string); !ok {
					r.err(p+"."+k, CodeInvalidType, "%s must be a string", k)
				}
			}
		}
	case "login":
		for _, k := range []string{"username", "password"} {
			if v, ok := m[k]; ok {
				if _, ok := v.(string); !ok {
					r.err(p+"."+k, CodeInvalidType, "%s must be a string", k)
				}
			}
		}
	}
}

// InSite reports whether a path in a Blueprint (absolute under
// /wordpress, or relative to it) stays inside the site's WordPress
// directory once cleaned.
func InSite(p string) bool {
	if p == "" || strings.ContainsRune(p, 0) {
		return false
	}
	if !strings.HasPrefix(p, "/") {
		p = "/wordpress/" + p
	}
	c := path.Clean(p)
	return c == "/wordpress" || strings.HasPrefix(c, "/wordpress/")
}

// checkWPCLI accepts the wp-cli commands the runner does itself.
func checkWPCLI(p string, v any, r *report) {
	s, ok := v.(string)
	if !ok {
		if v != nil {
			r.err(p, CodeInvalidType, "command must be a string")
		}
		return
	}
	args, err := SplitCommand(s)
	if err != nil {
		r.err(p, CodeInvalidValue, "command: %v", err)
		return
	}
	if len(args) > 0 && args[0] == "wp" {
		args = args[1:]
	}
	var words []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			words = append(words, a)
		}
	}
	if len(words) == 0 {
		r.err(p, CodeInvalidValue, "command names no wp-cli command")
		return
	}
	subs, known := wpCLICommands[words[0]]
	switch {
	case !known:
		r.err(p, CodeWPCLIUnsupported, "wp %s is not a command this service runs (it runs: %s)", words[0], strings.Join(keysOf(wpCLICommands), ", "))
	case subs != nil && (len(words) < 2 || !slices.Contains(subs, words[1])):
		sub := ""
		if len(words) > 1 {
			sub = words[1]
		}
		r.err(p, CodeWPCLIUnsupported, "wp %s %s is not a command this service runs (wp %s: %s)", words[0], sub, words[0], strings.Join(subs, ", "))
	}
}

// SplitCommand splits a shell-like command line: words separated by
// spaces, single and double quotes group, backslash escapes outside
// single quotes. No expansion of any kind.
func SplitCommand(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in := false
	var quote rune
	esc := false
	for _, c := range s {
		switch {
		case esc:
			cur.WriteRune(c)
			esc = false
		case c == '\\' && quote != '\'':
			esc, in = true, true
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	if quote != 0 || esc {
		return nil, fmt.Errorf("unterminated quote or escape")
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// checkResource checks a resource value of the kind a property holds.
func checkResource(p string, v any, kind resourceKind, env Env, r *report) {
	m, ok := v.(map[string]any)
	if !ok {
		r.err(p, CodeInvalidType, "%s must be a resource object ({\"resource\": …}), not %s", p, jsonType(v))
		return
	}
	typ, _ := m["resource"].(string)
	if typ == "" {
		r.err(p, CodeMissingProperty, "%s has no resource type (property \"resource\")", p)
		return
	}
	var spec resourceSpec
	var allowed []string
	if kind == fileResource || kind == fileOrDirResource {
		allowed = append(allowed, keysOf(fileResources)...)
	}
	if kind == dirResource || kind == fileOrDirResource {
		allowed = append(allowed, keysOf(dirResources)...)
	}
	if s, ok := fileResources[typ]; ok && slices.Contains(allowed, typ) {
		spec = s
	} else if s, ok := dirResources[typ]; ok && slices.Contains(allowed, typ) {
		spec = s
	} else {
		r.err(p+".resource", CodeUnknownResource, "%q is not a resource type this property takes%s", typ, didYouMean(typ, allowed))
		return
	}
	for _, k := range keysOf(m) {
		if k != "resource" && !slices.Contains(spec.required, k) && !slices.Contains(spec.optional, k) {
			r.err(p+"."+k, CodeUnknownProperty, "a %s resource takes no property %q%s", typ, k,
				didYouMean(k, append(slices.Clone(spec.required), spec.optional...)))
		}
	}
	for _, k := range spec.required {
		if _, ok := m[k]; !ok {
			r.err(p, CodeMissingProperty, "a %s resource needs %q", typ, k)
		}
	}
	switch typ {
	case "url", "git:directory":
		u, _ := m["url"].(string)
		pu, err := url.Parse(u)
		if u == "" || err != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" || pu.User != nil {
			r.err(p+".url", CodeInvalidValue, "%q is not an http(s) URL without credentials", u)
			return
		}
		if env.Reach != nil {
			if err := env.Reach(u); err != nil {
				r.err(p+".url", CodeResourceUnreachable, "%s cannot be fetched here: %v", u, err)
			}
		}
	case "wordpress.org/plugins", "wordpress.org/themes":
		slug, _ := m["slug"].(string)
		if !slugOK(slug) {
			r.err(p+".slug", CodeInvalidValue, "%q is not a wordpress.org slug", slug)
			return
		}
		kind := strings.TrimSuffix(strings.TrimPrefix(typ, "wordpress.org/"), "s")
		if v, ok := env.Library[kind+":"+slug]; ok {
			if v != "" {
				v = " (version " + v + ")"
			}
			r.add(SeverityInfo, p, CodeFromLibrary, "the %s %s comes from the workspace's Library%s, not wordpress.org", kind, slug, v)
			return
		}
		if env.Reach != nil {
			if err := env.Reach(DirectoryURL(typ, slug)); err != nil {
				r.err(p+".slug", CodeResourceUnreachable, "%s %s cannot be fetched here: %v", typ, slug, err)
			}
		}
	case "bundled":
		bp, _ := m["path"].(string)
		if !env.Bundle {
			r.err(p, CodeBundledResource, "a bundled resource (%s) needs the Blueprint uploaded as a bundle with its files", bp)
		} else if !inBundle(bp) {
			r.err(p+".path", CodePathOutsideSite, "%q leaves the bundle", bp)
		} else if _, ok := env.BundleFiles[path.Clean(bp)]; env.BundleFiles != nil && !ok {
			r.err(p+".path", CodeBundledFileMissing, "the bundle has no file %q", bp)
		}
	case "vfs":
		vp, _ := m["path"].(string)
		if !InSite(vp) && !strings.HasPrefix(path.Clean(vp), "/tmp/") {
			r.err(p+".path", CodePathOutsideSite, "%q is outside the site (/wordpress) and /tmp", vp)
		}
	case "literal":
		if _, ok := m["contents"].(string); !ok && m["contents"] != nil {
			r.err(p+".contents", CodeInvalidType, "literal contents must be a string here")
		}
	case "zip":
		if inner, ok := m["inner"]; ok {
			checkResource(p+".inner", inner, fileOrDirResource, env, r)
		}
	case "literal:directory":
		if _, ok := m["files"].(map[string]any); !ok {
			r.err(p+".files", CodeInvalidType, "files must be an object of names to contents or directories")
		}
	}
}

// inBundle reports whether a bundled path stays in the bundle.
func inBundle(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || strings.Contains(p, "\\") {
		return false
	}
	c := path.Clean(p)
	return c != ".." && !strings.HasPrefix(c, "../")
}

func slugOK(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// DirectoryURL is the wordpress.org download URL of a plugin or theme
// slug (latest stable), which the resource mirror maps.
func DirectoryURL(typ, slug string) string {
	if typ == "wordpress.org/themes" {
		return "https://downloads.wordpress.org/theme/" + slug + ".zip"
	}
	return "https://downloads.wordpress.org/plugin/" + slug + ".zip"
}

// checkVersions checks preferredVersions against the images here.
func checkVersions(m map[string]any, env Env, r *report) (php, wp string) {
	for _, k := range keysOf(m) {
		if k != "php" && k != "wp" {
			r.err("preferredVersions."+k, CodeUnknownProperty, "unknown property %q%s", k, didYouMean(k, []string{"php", "wp"}))
		}
	}
	for _, k := range []string{"php", "wp"} {
		if _, ok := m[k]; !ok {
			r.err("preferredVersions", CodeMissingProperty, "preferredVersions needs %s (\"latest\" for the newest here)", k)
		}
	}
	if v, ok := m["php"]; ok {
		s, isStr := v.(string)
		switch {
		case !isStr:
			r.err("preferredVersions.php", CodeInvalidType, "preferredVersions.php must be a string")
		case s == "latest":
			php = s
		case s == "7.2" || s == "7.3":
			php = s
			r.add(SeverityWarning, "preferredVersions.php", CodeDeprecated, "PHP %s is deprecated and runs as 7.4", s)
			if len(env.PHPVersions) > 0 && !slices.Contains(env.PHPVersions, "7.4") {
				r.err("preferredVersions.php", CodePHPVersionUnavailable, "PHP 7.4 has no image here (available: %s); the nearest is %s",
					strings.Join(env.PHPVersions, ", "), Nearest("7.4", env.PHPVersions))
			}
		case !slices.Contains([]string{"next", "5.2", "7.4", "8.0", "8.1", "8.2", "8.3", "8.4", "8.5"}, s):
			r.err("preferredVersions.php", CodeInvalidValue, "%q is not a PHP version of the format", s)
		default:
			php = s
			if len(env.PHPVersions) > 0 && !slices.Contains(env.PHPVersions, s) {
				r.err("preferredVersions.php", CodePHPVersionUnavailable, "PHP %s has no image here (available: %s); the nearest is %s",
					s, strings.Join(env.PHPVersions, ", "), Nearest(s, env.PHPVersions))
			}
		}
	}
	if v, ok := m["wp"]; ok {
		switch x := v.(type) {
		case bool:
			if x {
				r.err("preferredVersions.wp", CodeInvalidValue, "preferredVersions.wp is a version string, \"latest\", or false")
			} else {
				r.err("preferredVersions.wp", CodeWPVersionUnavailable, "sandboxes always run WordPress; false (PHP only) is not available")
			}
		case string:
			wp = x
			switch {
			case x == "latest" || x == "":
			case len(env.WordPressVersions) == 0:
			case versionLike(x) && slices.ContainsFunc(env.WordPressVersions, func(have string) bool { return sameRelease(x, have) }):
			default:
				near := env.WordPressVersions[len(env.WordPressVersions)-1]
				if versionLike(x) {
					near = Nearest(x, env.WordPressVersions)
				}
				r.err("preferredVersions.wp", CodeWPVersionUnavailable, "WordPress %s is not available here (available: %s); the nearest is %s",
					x, strings.Join(env.WordPressVersions, ", "), near)
			}
		default:
			r.err("preferredVersions.wp", CodeInvalidType, "preferredVersions.wp must be a string or false")
		}
	}
	// Each image pairs one PHP with one WordPress.
	if want, ok := env.WordPressOf[php]; ok && versionLike(wp) && !sameRelease(wp, want) &&
		slices.ContainsFunc(env.WordPressVersions, func(h string) bool { return sameRelease(wp, h) }) {
		r.err("preferredVersions", CodeWPVersionUnavailable, "PHP %s comes with WordPress %s here, not %s; pick PHP and WordPress of one image (%s)",
			php, want, wp, pairs(env))
	}
	return php, wp
}

// pairs lists the images' PHP and WordPress versions.
func pairs(env Env) string {
	var out []string
	for _, p := range env.PHPVersions {
		out = append(out, "PHP "+p+" with WordPress "+env.WordPressOf[p])
	}
	return strings.Join(out, ", ")
}

// versionLike reports a dotted numeric version (6.1, 6.1.1).
func versionLike(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return false
	}
	for _, p := range parts {
		if _, err := strconv.Atoi(p); err != nil {
			return false
		}
	}
	return true
}

// sameRelease reports whether want (6.1 or 6.1.1) is served by have.
func sameRelease(want, have string) bool {
	return want == have || strings.HasPrefix(have, want+".") || strings.HasPrefix(want, have+".")
}

// Nearest is the version of have closest to want (major and minor
// compared as numbers; a tie goes to the newer).
func Nearest(want string, have []string) string {
	key := func(v string) int {
		parts := strings.SplitN(v, ".", 3)
		maj, _ := strconv.Atoi(parts[0])
		minor := 0
		if len(parts) > 1 {
			minor, _ = strconv.Atoi(parts[1])
		}
		return maj*100 + minor
	}
	best, bestD := "", 1<<30
	for _, h := range have {
		d := key(h) - key(want)
		if d < 0 {
			d = -d
		}
		if d < bestD || d == bestD && key(h) > key(best) {
			best, bestD = h, d
		}
	}
	return best
}

// RawURL turns a code host's page URL of a file into the URL of the file
// itself: github.com/o/r/blob/ref/path → raw.githubusercontent.com/o/r/ref/path,
// and a gist page → its raw form. Any other URL is returned as it is.
func RawURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" && u.Scheme != "http" {
		return raw
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch strings.ToLower(u.Host) {
	case "github.com", "www.github.com":
		if len(parts) >= 5 && (parts[2] == "blob" || parts[2] == "raw") {
			return "https://raw.githubusercontent.com/" + strings.Join(append(parts[:2:2], parts[3:]...), "/")
		}
	case "gist.github.com":
		if len(parts) == 2 {
			return "https://gist.githubusercontent.com/" + parts[0] + "/" + parts[1] + "/raw"
		}
	}
	return raw
}
