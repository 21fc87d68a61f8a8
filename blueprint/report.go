package blueprint

import (
	"fmt"
	"sort"
	"strings"
)

// Severities of a finding: an error keeps the Blueprint from running, a
// warning runs with a difference the author should know of, info is a
// note.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
	SeverityInfo    = "info"
)

// Severities is every finding's severity, for the API document.
var Severities = []string{SeverityError, SeverityWarning, SeverityInfo}

// Finding codes (compatReport[].code). Codes documents each one.
const (
	CodeInvalidJSON           = "invalid_json"
	CodeInvalidType           = "invalid_type"
	CodeInvalidValue          = "invalid_value"
	CodeUnknownProperty       = "unknown_property"
	CodeMissingProperty       = "missing_property"
	CodeUnknownStep           = "unknown_step"
	CodeUnknownResource       = "unknown_resource"
	CodeDeprecated            = "deprecated"
	CodeUnsupportedStep       = "unsupported_step"
	CodeUnsupportedVersion    = "unsupported_blueprint_version"
	CodePHPVersionUnavailable = "php_version_unavailable"
	CodeWPVersionUnavailable  = "wordpress_version_unavailable"
	CodeWPCLIUnsupported      = "wpcli_command_unsupported"
	CodeResourceUnreachable   = "resource_unreachable"
	CodePathOutsideSite       = "path_outside_site"
	CodeIgnoredStep           = "ignored_step"
	CodeBundledResource       = "bundled_resource_needs_bundle"
	CodeBundledFileMissing    = "bundled_file_missing"
	CodeTooManyFindings       = "too_many_findings"
	CodeTooManySteps          = "too_many_steps"
	CodeReservedConstant      = "reserved_constant"
	CodeFromLibrary           = "from_library"
)

// Codes explains every finding code, for the OpenAPI document.
var Codes = map[string]string{
	CodeInvalidJSON:           "error: the source is not a JSON object.",
	CodeInvalidType:           "error: a value has the wrong JSON type for its property.",
	CodeInvalidValue:          "error: a value is outside what its property allows.",
	CodeUnknownProperty:       "error: a property the format does not have (the message suggests the closest one).",
	CodeMissingProperty:       "error: a required property is missing.",
	CodeUnknownStep:           "error: a step name the format does not have (the message suggests the closest one).",
	CodeUnknownResource:       "error: a resource type the format does not have.",
	CodeDeprecated:            "warning: a deprecated form; adapt rewrites it to the current one.",
	CodeUnsupportedStep:       "error: a step this service cannot run.",
	CodeUnsupportedVersion:    "error: a Blueprint format version other than 1.",
	CodePHPVersionUnavailable: "error: no image of this PHP version here; the message names the nearest available, which adapt picks.",
	CodeWPVersionUnavailable:  "error: no WordPress of this version here; the message names the nearest available, which adapt picks.",
	CodeWPCLIUnsupported:      "error: a wp-cli command the runner does not do.",
	CodeResourceUnreachable:   "error: the resource fetcher cannot reach this URL (not mirrored, or refused by the address guard).",
	CodePathOutsideSite:       "error: a path outside the site's WordPress directory (/wordpress).",
	CodeIgnoredStep:           "info: a falsy or non-object entry of steps, skipped as Playground skips it.",
	CodeBundledResource:       "error: a bundled resource outside a bundle upload (POST /api/app/blueprints/upload).",
	CodeBundledFileMissing:    "error: a bundled resource names a file the bundle does not have.",
	CodeTooManyFindings:       "error: the report stops at 200 findings.",
	CodeTooManySteps:          "error: more steps than a Blueprint may have (1000).",
	CodeReservedConstant:      "error: a wp-config constant the service sets itself (database, salts, URLs, updates).",
	CodeFromLibrary:           "info: a wordpress.org plugin or theme the workspace's Library has: the Library's ZIP is installed.",
}

// Finding is one compatReport item.
type Finding struct {
	Severity string `json:"severity" enum:"@findingSeverity"`
	Path     string `json:"path" doc:"Where in the source, e.g. steps[2].pluginData.slug; empty for the whole source."`
	Code     string `json:"code"`
	Message  string `json:"message"`
}

// report collects findings.
type report struct{ items []Finding }

func (r *report) add(sev, path, code, format string, args ...any) {
	switch {
	case len(r.items) < maxFindings:
		r.items = append(r.items, Finding{Severity: sev, Path: path, Code: code, Message: fmt.Sprintf(format, args...)})
	case len(r.items) == maxFindings:
		r.items = append(r.items, Finding{Severity: SeverityError, Code: CodeTooManyFindings,
			Message: fmt.Sprintf("more than %d findings; the rest are left out", maxFindings)})
	}
}

func (r *report) err(path, code, format string, args ...any) {
	r.add(SeverityError, path, code, format, args...)
}

// HasErrors reports whether any finding is an error.
func HasErrors(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == SeverityError {
			return true
		}
	}
	return false
}

// suggest is the known name closest to s, or "" when none is close: a
// different case, a missing or extra letter or two, or one a prefix of
// the other.
func suggest(s string, known []string) string {
	if s == "" || len(s) > maxSuggest {
		return ""
	}
	best, bestD := "", 1<<30
	for _, k := range known {
		if strings.EqualFold(s, k) {
			return k
		}
		d := distance(strings.ToLower(s), strings.ToLower(k))
		if d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	// Close means a few edits, and fewer than half the name: "run" is
	// not "rm".
	if limit := max(2, len(s)/4); bestD <= limit && 2*bestD < len(s) {
		return best
	}
	return ""
}

// maxSuggest bounds the names suggestions are looked for (the distance
// costs the product of the lengths).
const maxSuggest = 64

// maxFindings bounds a report; past it one info finding says so.
const maxFindings = 200

// didYouMean is " (did you mean X?)" or "".
func didYouMean(s string, known []string) string {
	if k := suggest(s, known); k != "" {
		return fmt.Sprintf(" (did you mean %q?)", k)
	}
	return ""
}

// distance is the Levenshtein distance of two strings.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// keysOf lists a map's keys, sorted.
func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
