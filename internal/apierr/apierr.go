// Package apierr is the customer contract's error envelope: one error type
// that carries an HTTP status, a stable code and structured details, and the
// single function that writes it.
package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Codes the contract and its addendum fix. Clients branch on these.
const (
	CodeInvalidRequest     = "invalid_request"
	CodeAuthRequired       = "auth_required"
	CodeInsufficientScope  = "insufficient_scope"
	CodeCapabilityRequired = "capability_required"
	CodeOwnerRequired      = "owner_required"
	CodeWorkspaceNotFound  = "workspace_not_found"
	CodeJobNotFound        = "job_not_found"
	CodeTokenNotFound      = "token_not_found"
	CodeRoleNotFound       = "role_not_found"
	CodeMemberNotFound     = "member_not_found"
	CodeInvitationNotFound = "invitation_not_found"
	CodeAccountNotFound    = "account_not_found"
	CodeNotFound           = "not_found"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeRoleInUse          = "role_in_use"
	CodeConflict           = "conflict"
	CodePlanLimitReached   = "plan_limit_reached"
	CodePayloadTooLarge    = "payload_too_large"
	CodeRateLimited        = "rate_limited"
	CodeServiceUnavailable = "service_unavailable"
	CodeInternal           = "internal_error"
	CodeSiteNotFound       = "site_not_found"
	CodeTemplateNotFound   = "template_not_found"
	CodeBlueprintNotFound  = "blueprint_not_found"
	CodeImportNotFound     = "import_not_found"
	CodeSSHKeyNotFound     = "ssh_key_not_found"
	CodeCheckpointNotFound = "checkpoint_not_found"
	// CodeOffsetMismatch: an upload chunk at another offset than the
	// bytes received; details.expectedOffset says where to go on.
	CodeOffsetMismatch        = "offset_mismatch"
	CodePHPVersionUnavailable = "php_version_unavailable"
	// CodeTemplateSharingRequiresPaidPlan: a launch link on a free plan.
	CodeTemplateSharingRequiresPaidPlan = "template_sharing_requires_paid_plan"
	// CodeOutcomeUnknown: the write went out and its answer was lost; it
	// may or may not have been applied. Retry with the same Idempotency-Key.
	CodeOutcomeUnknown = "outcome_unknown"
	// CodeIdempotencyKeyReused: the Idempotency-Key was first used for
	// another request.
	CodeIdempotencyKeyReused = "idempotency_key_reused"
)

// statusOf is the HTTP status of each code; every code ending in
// _not_found is 404.
var statusOf = map[string]int{
	CodeInvalidRequest: http.StatusBadRequest, CodePHPVersionUnavailable: http.StatusBadRequest,
	// The OAuth endpoints' own codes (RFC 6749 5.2, RFC 7591 3.2.2).
	"invalid_grant": http.StatusBadRequest, "invalid_client": http.StatusBadRequest, "unsupported_grant_type": http.StatusBadRequest,
	"invalid_scope": http.StatusBadRequest, "invalid_target": http.StatusBadRequest, "invalid_redirect_uri": http.StatusBadRequest, "invalid_client_metadata": http.StatusBadRequest,
	CodeAuthRequired:     http.StatusUnauthorized,
	CodePlanLimitReached: http.StatusPaymentRequired, CodeTemplateSharingRequiresPaidPlan: http.StatusPaymentRequired,
	CodeInsufficientScope: http.StatusForbidden, CodeCapabilityRequired: http.StatusForbidden, CodeOwnerRequired: http.StatusForbidden,
	CodeMethodNotAllowed: http.StatusMethodNotAllowed, CodeNotFound: http.StatusNotFound,
	CodeConflict: http.StatusConflict, CodeRoleInUse: http.StatusConflict, CodeOffsetMismatch: http.StatusConflict, CodeIdempotencyKeyReused: http.StatusConflict,
	CodePayloadTooLarge:    http.StatusRequestEntityTooLarge,
	CodeRateLimited:        http.StatusTooManyRequests,
	CodeInternal:           http.StatusInternalServerError,
	CodeServiceUnavailable: http.StatusServiceUnavailable, CodeOutcomeUnknown: http.StatusServiceUnavailable,
}

// StatusOf is the HTTP status a code is answered with, so a document can
// declare each; ok is false for a code it does not know.
func StatusOf(code string) (status int, ok bool) {
	if s, ok := statusOf[code]; ok {
		return s, true
	}
	if strings.HasSuffix(code, "_not_found") {
		return http.StatusNotFound, true
	}
	return 0, false
}

// Error is an error that knows how it is shown to an API client.
// Details is never nil except on the internal-error fallback, so the
// envelope carries `details: {}` whenever there is no extra context.
type Error struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
	// Header holds response headers that belong to the error (Retry-After).
	Header http.Header
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// New returns an Error with empty details.
func New(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...), Details: map[string]any{}}
}

// With returns a copy of e with one more detail, so shared errors stay immutable.
func (e *Error) With(key string, value any) *Error {
	c := *e
	c.Details = make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		c.Details[k] = v
	}
	c.Details[key] = value
	return &c
}

// Invalid is the common 400 invalid_request; field names the offending
// request field and may be empty.
func Invalid(field, format string, args ...any) *Error {
	e := New(http.StatusBadRequest, CodeInvalidRequest, format, args...)
	if field != "" {
		e.Details["field"] = field
	}
	return e
}

// NotFound is a 404 with a resource-specific code.
func NotFound(code, what string) *Error {
	return New(http.StatusNotFound, code, "%s not found", what)
}

// Conflict is a 409 conflict.
func Conflict(format string, args ...any) *Error {
	return New(http.StatusConflict, CodeConflict, format, args...)
}

// AuthRequired is the 401 every unauthenticated request gets.
func AuthRequired() *Error {
	return New(http.StatusUnauthorized, CodeAuthRequired, "a valid bearer token is required")
}

// CapabilityRequired is the 403 for a role lacking a capability.
func CapabilityRequired(capability string) *Error {
	return New(http.StatusForbidden, CodeCapabilityRequired, "your workspace role lacks the %q capability", capability).
		With("capability", capability)
}

// PlanLimit is the 402 every plan limit returns.
func PlanLimit(plan, resource string, limit int) *Error {
	return New(http.StatusPaymentRequired, CodePlanLimitReached,
		"the %s plan allows at most %d %s", plan, limit, resource).
		With("plan", plan).With("limit", limit).With("resource", resource)
}

// Unavailable is a 503 telling the client to retry shortly.
func Unavailable(format string, args ...any) *Error {
	e := New(http.StatusServiceUnavailable, CodeServiceUnavailable, format, args...)
	e.Header = http.Header{"Retry-After": {"1"}}
	return e
}

// OutcomeUnknown is the 503 of a write whose outcome could not be
// learned: unlike Unavailable, it may have been applied.
func OutcomeUnknown(format string, args ...any) *Error {
	e := New(http.StatusServiceUnavailable, CodeOutcomeUnknown, format, args...)
	e.Header = http.Header{"Retry-After": {"1"}}
	return e
}

// RateLimited is the 429 of a spent rate limit: Retry-After says in
// whole seconds (at least 1) when a retry can succeed, and so does
// details.retryAfterSeconds; details.limit names the limit.
func RateLimited(retryAfter time.Duration, limit, format string, args ...any) *Error {
	secs := max(1, int(math.Ceil(retryAfter.Seconds())))
	e := New(http.StatusTooManyRequests, CodeRateLimited, format, args...).
		With("retryAfterSeconds", secs).With("limit", limit)
	e.Header = http.Header{"Retry-After": {strconv.Itoa(secs)}}
	return e
}

type envelope struct {
	Error body `json:"error"`
}

type body struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Details is an interface so that an empty map is still written as
	// {}; only the internal-error fallback leaves it nil (omitted).
	Details any `json:"details,omitempty"`
}

// Write sends err as the error envelope. An error that is not an *Error is
// the internal-error fallback: its text is not shown to the client (it may
// hold internals) and details are omitted.
func Write(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
	}
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	b := body{Code: e.Code, Message: e.Message}
	if e.Code != CodeInternal {
		if e.Details == nil {
			b.Details = map[string]any{}
		} else {
			b.Details = e.Details
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(envelope{Error: b})
}
