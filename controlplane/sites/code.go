package sites

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// maxCode bounds a PHP script or an SQL statement (the agent's bound too).
const maxCode = 1 << 20

// codeError turns a refused RunPHP or RunSQL into the contract's error:
// the statement's own error names the field.
func (s *Service) codeError(site *state.Site, field string, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return apierr.Unavailable("the site's node did not answer")
	}
	switch {
	case ce.Code() == connect.CodeInvalidArgument:
		return apierr.Invalid(field, "%s", ce.Message())
	case ce.Code() == connect.CodeResourceExhausted && ce.Meta().Get(agentv1.RefusalKey) == agentv1.RefusalDiskFull:
		return s.diskFull(site, ce.Message())
	case ce.Code() == connect.CodeResourceExhausted:
		return apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge, "%s", ce.Message())
	}
	return agentError(err)
}

// checkCode refuses an empty or oversized script or statement, and a
// time bound out of range, before the node is asked.
func checkCode(field, code string, timeout int) error {
	switch {
	case strings.TrimSpace(code) == "":
		return apierr.Invalid(field, "%s is required", field)
	case len(code) > maxCode:
		return apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge, "%s is over %d bytes", field, maxCode).With("field", field)
	case timeout < 0 || timeout > 120:
		return apierr.Invalid("timeoutSeconds", "timeoutSeconds must be 1 to 120 (0: the default, 30)")
	}
	return nil
}

// RunPHP runs a PHP script in a ready site, as its user, from its
// WordPress root.
func (s *Service) RunPHP(ctx context.Context, site *state.Site, code string, timeoutSeconds int) (*sitespec.PHPRun, error) {
	if err := checkCode("code", code, timeoutSeconds); err != nil {
		return nil, err
	}
	a, err := s.agent(site)
	if err != nil {
		return nil, err
	}
	resp, err := a.RunPHP(ctx, connect.NewRequest(&agentv1.RunPHPRequest{SiteId: site.ID, Code: code, TimeoutSeconds: int32(timeoutSeconds)}))
	if err != nil {
		return nil, s.codeError(site, "code", err)
	}
	m := resp.Msg
	return &sitespec.PHPRun{ExitCode: int(m.ExitCode), Stdout: strings.ToValidUTF8(string(m.Stdout), "\uFFFD"),
		Stderr: strings.ToValidUTF8(string(m.Stderr), "\uFFFD"), Truncated: m.Truncated, TimedOut: m.TimedOut}, nil
}

// RunSQL runs one statement in a ready site's database over its own
// account.
func (s *Service) RunSQL(ctx context.Context, site *state.Site, query string, timeoutSeconds int) (*sitespec.SQLRun, error) {
	if err := checkCode("query", query, timeoutSeconds); err != nil {
		return nil, err
	}
	a, err := s.agent(site)
	if err != nil {
		return nil, err
	}
	resp, err := a.RunSQL(ctx, connect.NewRequest(&agentv1.RunSQLRequest{SiteId: site.ID, Query: query, TimeoutSeconds: int32(timeoutSeconds)}))
	if err != nil {
		return nil, s.codeError(site, "query", err)
	}
	m := resp.Msg
	out := &sitespec.SQLRun{Columns: m.Columns, Rows: make([][]*string, 0, len(m.Rows)), AffectedRows: m.AffectedRows, Truncated: m.Truncated}
	if out.Columns == nil {
		out.Columns = []string{}
	}
	for _, r := range m.Rows {
		row := make([]*string, len(r.Values))
		for i, v := range r.Values {
			if !v.Null {
				str := strings.ToValidUTF8(v.Value, "\uFFFD")
				row[i] = &str
			}
		}
		out.Rows = append(out.Rows, row)
	}
	return out, nil
}
