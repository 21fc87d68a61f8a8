package blueprint

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Change is one rewrite Adapt made. ReviewRequired marks a change that
// alters what the Blueprint does (a guessed name, a different version,
// something dropped): a bundle upload takes those only when its
// adaptations are accepted.
type Change struct {
	Path           string `json:"path"`
	Code           string `json:"code"`
	Message        string `json:"message"`
	ReviewRequired bool   `json:"reviewRequired"`
}

// Adapted is a source rewritten to run here, with its changes and its
// own check.
type Adapted struct {
	Source  json.RawMessage `json:"source"`
	Changes []Change        `json:"changes"`
	Result  Result          `json:"-"`
}

// Adapt rewrites a source into one that runs here: deprecated forms
// become current ones, near-miss names the names they were meant to be,
// versions without an image the nearest that has one, option values
// strings; what cannot be mapped is dropped. A source that is not a JSON
// object cannot be adapted.
func Adapt(src []byte, env Env) (*Adapted, error) {
	doc, err := decode(src)
	if err != nil {
		return nil, err
	}
	a := &adapter{env: env}
	a.top(doc)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("adapt: %w", err)
	}
	res := Check(out, env)
	// A wordpress.org resource the Library has is installed from it: the
	// source keeps its form (it still runs on Playground), the change is
	// listed.
	for _, f := range res.Report {
		if f.Code == CodeFromLibrary {
			a.change(false, f.Path, CodeFromLibrary, "%s", f.Message)
		}
	}
	if a.changes == nil {
		a.changes = []Change{}
	}
	return &Adapted{Source: out, Changes: a.changes, Result: res}, nil
}

type adapter struct {
	env     Env
	changes []Change
}

func (a *adapter) change(review bool, path, code, format string, args ...any) {
	a.changes = append(a.changes, Change{Path: path, Code: code, Message: fmt.Sprintf(format, args...), ReviewRequired: review})
}

// rename moves m[from] to m[to] unless to is taken (then from goes).
func (a *adapter) rename(m map[string]any, prefix, from, to string, review bool, code string) {
	if _, taken := m[to]; taken {
		delete(m, from)
		a.change(true, prefix+from, code, "removed %s: %s is already set", from, to)
		return
	}
	m[to] = m[from]
	delete(m, from)
	a.change(review, prefix+from, code, "renamed %s to %s", from, to)
}

func (a *adapter) top(doc map[string]any) {
	if _, ok := doc["phpExtensionBundles"]; ok {
		delete(doc, "phpExtensionBundles")
		a.change(false, "phpExtensionBundles", CodeDeprecated, "removed phpExtensionBundles (no longer used)")
	}
	for _, k := range keysOf(doc) {
		if slices.Contains(topLevel, k) || k == "version" {
			continue
		}
		if to := suggest(k, topLevel); to != "" {
			a.rename(doc, "", k, to, true, CodeUnknownProperty)
		} else {
			delete(doc, k)
			a.change(true, k, CodeUnknownProperty, "removed the unknown property %s", k)
		}
	}
	if pv, ok := doc["preferredVersions"].(map[string]any); ok {
		a.versions(pv)
	}
	if o, ok := doc["siteOptions"].(map[string]any); ok {
		a.options("siteOptions", o)
	}
	if list, ok := doc["steps"].([]any); ok {
		kept := list[:0]
		for i, x := range list {
			m, ok := x.(map[string]any)
			if !ok || a.step(fmt.Sprintf("steps[%d]", i), m) {
				kept = append(kept, x)
			}
		}
		doc["steps"] = kept
	}
}

// versions fills and maps preferredVersions.
func (a *adapter) versions(pv map[string]any) {
	for _, k := range keysOf(pv) {
		if k != "php" && k != "wp" {
			delete(pv, k)
			a.change(true, "preferredVersions."+k, CodeUnknownProperty, "removed the unknown property %s", k)
		}
	}
	for _, k := range []string{"php", "wp"} {
		if _, ok := pv[k]; !ok {
			pv[k] = "latest"
			a.change(false, "preferredVersions."+k, CodeMissingProperty, "set %s to \"latest\" (the newest here), as Playground assumes", k)
		}
	}
	if php, ok := pv["php"].(string); ok {
		switch {
		case php == "7.2" || php == "7.3":
			pv["php"] = "7.4"
			a.change(false, "preferredVersions.php", CodeDeprecated, "PHP %s runs as 7.4", php)
			if len(a.env.PHPVersions) > 0 && !slices.Contains(a.env.PHPVersions, "7.4") {
				near := Nearest("7.4", a.env.PHPVersions)
				pv["php"] = near
				a.change(true, "preferredVersions.php", CodePHPVersionUnavailable, "PHP 7.4 has no image here: runs on PHP %s", near)
			}
		case php != "latest" && len(a.env.PHPVersions) > 0 && !slices.Contains(a.env.PHPVersions, php):
			near := Nearest(php, a.env.PHPVersions)
			pv["php"] = near
			a.change(true, "preferredVersions.php", CodePHPVersionUnavailable, "PHP %s has no image here: runs on PHP %s", php, near)
		}
	}
	if wp, ok := pv["wp"].(string); ok && wp != "latest" && wp != "" && len(a.env.WordPressVersions) > 0 &&
		!(versionLike(wp) && slices.ContainsFunc(a.env.WordPressVersions, func(h string) bool { return sameRelease(wp, h) })) {
		near := a.env.WordPressVersions[len(a.env.WordPressVersions)-1]
		if versionLike(wp) {
			near = Nearest(wp, a.env.WordPressVersions)
		}
		pv["wp"] = near
		a.change(true, "preferredVersions.wp", CodeWPVersionUnavailable, "WordPress %s is not available here: runs on WordPress %s", wp, near)
	}
	php, _ := pv["php"].(string)
	wp, _ := pv["wp"].(string)
	if want, ok := a.env.WordPressOf[php]; ok && versionLike(wp) && !sameRelease(wp, want) {
		pv["wp"] = want
		a.change(true, "preferredVersions.wp", CodeWPVersionUnavailable, "PHP %s comes with WordPress %s here: runs on WordPress %s", php, want, want)
	}
}

// options writes scalar option values as strings.
func (a *adapter) options(path string, o map[string]any) {
	for _, k := range keysOf(o) {
		switch v := o[k].(type) {
		case json.Number:
			o[k] = v.String()
		case bool:
			o[k] = map[bool]string{true: "1", false: "0"}[v]
		default:
			continue
		}
		a.change(false, path+"."+k, CodeInvalidType, "wrote option %s as the string %q", k, o[k])
	}
}

// step adapts one step; false drops it.
func (a *adapter) step(p string, m map[string]any) bool {
	name, _ := m["step"].(string)
	if name == "" {
		return true // no name to guess from: left for the author
	}
	spec, known := steps[name]
	if !known {
		to := suggest(name, keysOf(steps))
		if to == "" {
			a.change(true, p, CodeUnknownStep, "removed the unknown step %q", name)
			return false
		}
		m["step"], spec = to, steps[to]
		a.change(true, p+".step", CodeUnknownStep, "renamed the step %s to %s", name, to)
		name = to
	}
	for _, old := range keysOf(spec.deprecated) {
		if _, ok := m[old]; ok {
			a.rename(m, p+".", old, spec.deprecated[old], false, CodeDeprecated)
		}
	}
	for _, k := range keysOf(m) {
		if k == "step" || k == "progress" || slices.Contains(spec.keys, k) {
			continue
		}
		if to := suggest(k, spec.keys); to != "" && !slices.Contains(keysOf(spec.deprecated), to) {
			a.rename(m, p+".", k, to, true, CodeUnknownProperty)
		} else {
			delete(m, k)
			a.change(true, p+"."+k, CodeUnknownProperty, "removed %s, which %s does not take", k, name)
		}
	}
	return true
}

// ReviewRequired reports whether any change needs a person's consent.
func (a *Adapted) ReviewRequired() bool {
	return slices.ContainsFunc(a.Changes, func(c Change) bool { return c.ReviewRequired })
}
