package templates

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/naming"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templatespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

var hexColour = regexp.MustCompile(`^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$`)

// Update applies a PATCH: every field checked, launch and the warm pool
// held to the plan, the launch token made once. It writes only over the
// template it read: a freeze job that finished meanwhile is read again
// and the PATCH applied to it.
func (s *Service) Update(ctx context.Context, t *state.Template, p templatespec.Patch) (*state.Template, error) {
	for try := 0; ; try++ {
		next, err := s.patched(t, p)
		if err != nil {
			return nil, err
		}
		read := t.UpdatedAt
		_, err = s.cfg.Raft.Apply(ctx, fsm.PutTemplate{Template: *next, IfUpdatedAt: &read})
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, state.ErrNotFound):
			return nil, templatespec.NotFound()
		case !errors.Is(err, state.ErrStale) || try == 4:
			return nil, err
		}
		if t, err = s.In(t.WorkspaceID, t.ID); err != nil {
			return nil, err
		}
	}
}

// patched is template t with a PATCH applied and checked.
func (s *Service) patched(t *state.Template, p templatespec.Patch) (*state.Template, error) {
	next := *t
	var err error
	if p.Name != nil {
		if next.Name, err = naming.Name(*p.Name); err != nil {
			return nil, err
		}
	}
	if p.Description != nil {
		if next.Description, err = naming.Description(*p.Description); err != nil {
			return nil, err
		}
	}
	if err := applyLaunch(&next.Launch, p); err != nil {
		return nil, err
	}
	plan, err := s.planOf(t)
	if err != nil {
		return nil, err
	}
	if next.Launch.Enabled && !t.Launch.Enabled && plan != state.PlanPaid {
		return nil, paidOnly("launchEnabled")
	}
	if p.WarmPoolSize != nil {
		n := *p.WarmPoolSize
		switch {
		case n < 0 || n > s.cfg.MaxWarmPool:
			return nil, apierr.Invalid("warmPoolSize", "warmPoolSize must be between 0 and %d", s.cfg.MaxWarmPool).With("max", s.cfg.MaxWarmPool)
		case n > 0 && plan != state.PlanPaid:
			return nil, apierr.PlanLimit(plan, "warmPoolSize", 0)
		}
		next.WarmPoolSize = n
	}
	if next.Launch.Enabled && next.Launch.Token == "" {
		next.Launch.Token = ids.Random(16)
	}
	next.UpdatedAt = Later(s.now(), t.UpdatedAt)
	return &next, nil
}

// Later is now, or just after prev when the clock has not moved past it:
// a template's UpdatedAt always grows, so a conditional write that read
// an older one is refused.
func Later(now, prev time.Time) time.Time {
	if now.After(prev) {
		return now
	}
	return prev.Add(time.Millisecond)
}

// applyLaunch checks and applies the launch fields of a PATCH.
func applyLaunch(l *state.Launch, p templatespec.Patch) error {
	oneOf := func(field string, v *string, dst *string, allowed ...string) error {
		if v == nil {
			return nil
		}
		for _, a := range allowed {
			if *v == a {
				*dst = a
				return nil
			}
		}
		return apierr.Invalid(field, "%s must be one of %s", field, strings.Join(allowed, ", ")).With("allowed", allowed)
	}
	if p.LaunchEnabled != nil {
		l.Enabled = *p.LaunchEnabled
	}
	if err := oneOf("launchQuotaMode", p.LaunchQuotaMode, &l.QuotaMode, templatespec.QuotaModes...); err != nil {
		return err
	}
	if err := oneOf("launchEntryMode", p.LaunchEntryMode, &l.EntryMode, templatespec.EntryModes...); err != nil {
		return err
	}
	if err := oneOf("launchExpirationMode", p.LaunchExpirationMode, &l.ExpirationMode, templatespec.ExpirationModes...); err != nil {
		return err
	}
	if v := p.LaunchExpirationMinutes; v != nil {
		if *v < 1 || *v > 43200 {
			return apierr.Invalid("launchExpirationMinutes", "launchExpirationMinutes must be between 1 and 43200")
		}
		l.ExpirationMinutes = *v
	}
	if v := p.LaunchLandingPath; v != nil {
		if !strings.HasPrefix(*v, "/") || strings.HasPrefix(*v, "//") || strings.ContainsAny(*v, "\\") || len(*v) > 2000 || hasControl(*v) {
			return apierr.Invalid("launchLandingPath", "launchLandingPath must be a path in the sandbox starting with / (at most 2000 characters)")
		}
		l.LandingPath = *v
	}
	for _, b := range []struct {
		v   *bool
		dst *bool
	}{{p.LaunchProtected, &l.Protected}, {p.LaunchConsentEnabled, &l.ConsentEnabled}, {p.LaunchConsentDefaultChecked, &l.ConsentDefaultChecked}} {
		if b.v != nil {
			*b.dst = *b.v
		}
	}
	if err := text("launchConsentLabel", p.LaunchConsentLabel, &l.ConsentLabel, 500); err != nil {
		return err
	}
	if bp := p.LaunchBranding; bp != nil {
		b := &l.Branding
		for _, f := range []struct {
			field string
			v     *string
			dst   *string
			max   int
		}{{"eyebrow", bp.Eyebrow, &b.Eyebrow, 80}, {"headline", bp.Headline, &b.Headline, 200}, {"subhead", bp.Subhead, &b.Subhead, 500},
			{"buttonLabel", bp.ButtonLabel, &b.ButtonLabel, 60}, {"brandName", bp.BrandName, &b.BrandName, 100}} {
			if err := text("launchBranding."+f.field, f.v, f.dst, f.max); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			field string
			v     *string
			dst   *string
		}{{"accentColor", bp.AccentColor, &b.AccentColor}, {"backgroundColor", bp.BackgroundColor, &b.BackgroundColor}} {
			if f.v != nil {
				if *f.v != "" && !hexColour.MatchString(*f.v) {
					return apierr.Invalid("launchBranding."+f.field, "%s must be a hex colour such as #1e40af", f.field)
				}
				*f.dst = *f.v
			}
		}
		for _, f := range []struct {
			field string
			v     *string
			dst   *string
		}{{"logoUrl", bp.LogoURL, &b.LogoURL}, {"backgroundImageUrl", bp.BackgroundImageURL, &b.BackgroundImageURL}} {
			if f.v != nil {
				if *f.v != "" && !httpsURL(*f.v) {
					return apierr.Invalid("launchBranding."+f.field, "%s must be an https URL (at most 2048 characters)", f.field)
				}
				*f.dst = *f.v
			}
		}
		if bp.HidePoweredBy != nil {
			b.HidePoweredBy = *bp.HidePoweredBy
		}
	}
	return nil
}

// text checks a shown string: bounded, one line of printable text.
func text(field string, v *string, dst *string, max int) error {
	if v == nil {
		return nil
	}
	if utf8.RuneCountInString(*v) > max || !utf8.ValidString(*v) || hasControl(*v) {
		return apierr.Invalid(field, "%s must be at most %d characters of text on one line", field, max)
	}
	*dst = *v
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

func httpsURL(raw string) bool {
	if len(raw) > 2048 || hasControl(raw) {
		return false
	}
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "https" && u.Host != "" && u.User == nil
}
