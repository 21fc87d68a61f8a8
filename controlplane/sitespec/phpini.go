package sitespec

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/apierr"
)

var sizeRE = regexp.MustCompile(`^([0-9]{1,7})([KMG]?)$`)

func parseSize(v string) (int64, bool) {
	m := sizeRE.FindStringSubmatch(strings.ToUpper(v))
	if m == nil {
		return 0, false
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	switch m[2] {
	case "K":
		n <<= 10
	case "M":
		n <<= 20
	case "G":
		n <<= 30
	}
	return n, true
}

// directive validates one php.ini value and returns it normalised.
type directive func(v string) (string, error)

func sizeBetween(min, max int64) directive {
	return func(v string) (string, error) {
		n, ok := parseSize(v)
		if !ok || n < min || n > max {
			return "", fmt.Errorf("must be a size such as 256M between %dK and %dM", min>>10, max>>20)
		}
		return strings.ToUpper(v), nil
	}
}

func intBetween(min, max int64) directive {
	return func(v string) (string, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min || n > max {
			return "", fmt.Errorf("must be a whole number between %d and %d", min, max)
		}
		return strconv.FormatInt(n, 10), nil
	}
}

func oneOf(values ...string) directive {
	return func(v string) (string, error) {
		for _, ok := range values {
			if strings.EqualFold(v, ok) {
				return ok, nil
			}
		}
		return "", fmt.Errorf("must be one of %s", strings.Join(values, ", "))
	}
}

// phpDirectives is the allow-list: what a site may change, and how.
var phpDirectives = map[string]directive{
	"memory_limit":        sizeBetween(16<<20, 1<<30),
	"upload_max_filesize": sizeBetween(1<<10, 1<<30),
	"post_max_size":       sizeBetween(1<<10, 1<<30),
	"max_execution_time":  intBetween(0, 3600),
	"max_input_time":      intBetween(-1, 3600),
	"max_input_vars":      intBetween(100, 100000),
	"display_errors":      oneOf("On", "Off", "stderr"),
}

// phpDefaults are the sandbox image's values of the allow-listed
// directives (agent/sites' php.ini and PHP's own defaults).
var phpDefaults = map[string]string{
	"memory_limit": "256M", "upload_max_filesize": "64M", "post_max_size": "64M", "max_execution_time": "60",
	"max_input_time": "-1", "max_input_vars": "1000", "display_errors": "Off",
}

// EffectivePHP is the settings in effect: the defaults with a site's
// overrides.
func EffectivePHP(overrides map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range phpDefaults {
		out[k] = v
	}
	for k, v := range overrides {
		out[k] = v
	}
	return out
}

// ParsePHPSettings checks changes to php.ini settings against the
// allow-list and returns them normalised; values may be strings, whole
// numbers or booleans (On/Off). An error names the field.
func ParsePHPSettings(settings map[string]any) (map[string]string, error) {
	if settings == nil {
		return nil, apierr.Invalid("settings", "settings is required: an object of php.ini directives")
	}
	changes := map[string]string{}
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		check, ok := phpDirectives[k]
		field := "settings." + k
		if !ok {
			allowed := make([]string, 0, len(phpDirectives))
			for d := range phpDirectives {
				allowed = append(allowed, d)
			}
			sort.Strings(allowed)
			return nil, apierr.Invalid(field, "%s cannot be changed (allowed: %s)", k, strings.Join(allowed, ", ")).With("allowed", allowed)
		}
		var raw string
		switch v := settings[k].(type) {
		case string:
			raw = strings.TrimSpace(v)
		case float64:
			if v != float64(int64(v)) {
				return nil, apierr.Invalid(field, "%s must be a whole number", k)
			}
			raw = strconv.FormatInt(int64(v), 10)
		case bool:
			raw = map[bool]string{true: "On", false: "Off"}[v]
		default:
			return nil, apierr.Invalid(field, "%s must be a string or a number", k)
		}
		val, err := check(raw)
		if err != nil {
			return nil, apierr.Invalid(field, "%s %s", k, err.Error())
		}
		changes[k] = val
	}
	return changes, nil
}
