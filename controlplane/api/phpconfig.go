package api

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// PHPConfig is a site's allow-listed php.ini settings.
type PHPConfig struct {
	Settings map[string]string `json:"settings"`
}

// PHPConfigRequest is the body of PUT …/php-config. Values may be strings
// or numbers.
type PHPConfigRequest struct {
	Settings map[string]any `json:"settings"`
}

type phpConfigResponse struct {
	PHPConfig PHPConfig `json:"phpConfig"`
}

type phpConfigJobResponse struct {
	PHPConfig PHPConfig `json:"phpConfig"`
	JobID     string    `json:"jobId"`
}

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

func effective(overrides map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range phpDefaults {
		out[k] = v
	}
	for k, v := range overrides {
		out[k] = v
	}
	return out
}

func (a *API) registerPHPConfig(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/php-config", Tag: "sites", Params: siteParam,
		Summary: "The site's allow-listed php.ini settings in effect.", Response: phpConfigResponse{},
		Errors: []string{apierr.CodeSiteNotFound}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, phpConfigResponse{PHPConfig: PHPConfig{Settings: effective(s.PHPConfig)}})
		}})
	a.bearer(r, g, rest.Route{Method: "PUT", Path: "/api/app/sites/{id}/php-config", Tag: "sites", Params: siteParam,
		Status: http.StatusAccepted, Request: PHPConfigRequest{}, Response: phpConfigJobResponse{},
		Summary: "Change php.ini settings (memory_limit, upload_max_filesize, post_max_size, max_execution_time, " +
			"max_input_time, max_input_vars, display_errors); a job applies them without taking the site down.",
		Errors:  []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodePayloadTooLarge},
		Handler: a.putPHPConfig})
}

func (a *API) putPHPConfig(w http.ResponseWriter, req *http.Request) error {
	var body PHPConfigRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	if body.Settings == nil {
		return apierr.Invalid("settings", "settings is required: an object of php.ini directives")
	}
	changes := map[string]string{}
	names := make([]string, 0, len(body.Settings))
	for k := range body.Settings {
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
			return apierr.Invalid(field, "%s cannot be changed (allowed: %s)", k, strings.Join(allowed, ", ")).With("allowed", allowed)
		}
		var raw string
		switch v := body.Settings[k].(type) {
		case string:
			raw = strings.TrimSpace(v)
		case float64:
			if v != float64(int64(v)) {
				return apierr.Invalid(field, "%s must be a whole number", k)
			}
			raw = strconv.FormatInt(int64(v), 10)
		case bool:
			raw = map[bool]string{true: "On", false: "Off"}[v]
		default:
			return apierr.Invalid(field, "%s must be a string or a number", k)
		}
		val, err := check(raw)
		if err != nil {
			return apierr.Invalid(field, "%s %s", k, err.Error())
		}
		changes[k] = val
	}
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	if s.Status != state.SiteReady {
		return notReady(s)
	}
	next := map[string]string{}
	for k, v := range s.PHPConfig {
		next[k] = v
	}
	for k, v := range changes {
		next[k] = v
	}
	now := a.now()
	job, err := jobs.New(jobspec.UpdatePHPConfig, s.WorkspaceID, s.ID, jobspec.PHPConfigPayload{Settings: next}, now)
	if err != nil {
		return err
	}
	if _, err := a.apply(req.Context(), fsm.CreateJob{Job: job}, nil); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusAccepted, phpConfigJobResponse{PHPConfig: PHPConfig{Settings: effective(next)}, JobID: job.ID})
}
