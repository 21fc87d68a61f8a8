// Package templatespec is what the API and the templates service say to
// each other: a create, a patch, the launch settings' value sets, and
// finding a workspace's template. It holds no Raft command.
package templatespec

import (
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Create is what a new template is made from.
type Create struct {
	Workspace   *state.Workspace
	By          *state.Account
	SiteID      string
	Name        string
	Description string
	// Answer, for a REST request, is rendered from the template and its
	// job and goes in their Raft entry (nil: none).
	Answer *writes.Answer[sitespec.Made]
}

// The launch settings' value sets.
var (
	QuotaModes      = []string{"visitor", "unlimited"}
	EntryModes      = []string{"anonymous", "email"}
	ExpirationModes = []string{"fixed", "none"}
)

// In returns a template of the workspace from the store, or the 404.
func In(store *state.Store, workspaceID, id string) (*state.Template, error) {
	t, err := store.Template(id)
	if err != nil {
		return nil, err
	}
	if t == nil || t.WorkspaceID != workspaceID || t.RebuildOf != "" {
		return nil, NotFound()
	}
	return t, nil
}

// NotFound is the contract's 404 for a template.
func NotFound() error { return apierr.NotFound(apierr.CodeTemplateNotFound, "template") }

// Patch is the body of PATCH /api/app/templates/{id}: a field left out
// stays as it is.
type Patch struct {
	Name         *string `json:"name,omitempty"`
	Description  *string `json:"description,omitempty"`
	WarmPoolSize *int    `json:"warmPoolSize,omitempty" doc:"Ready sites of this template kept per node (paid plan; at most the operator's bound, 10 by default)."`
	// Launch link settings (the public launcher uses them).
	LaunchEnabled               *bool          `json:"launchEnabled,omitempty" doc:"A paid-plan feature: enabling it on a free plan answers 402 template_sharing_requires_paid_plan. launchToken is made when it is first enabled and never changes."`
	LaunchQuotaMode             *string        `json:"launchQuotaMode,omitempty" enum:"@launchQuotaMode"`
	LaunchEntryMode             *string        `json:"launchEntryMode,omitempty" enum:"@launchEntryMode"`
	LaunchExpirationMode        *string        `json:"launchExpirationMode,omitempty" enum:"@launchExpirationMode"`
	LaunchExpirationMinutes     *int           `json:"launchExpirationMinutes,omitempty" doc:"1..43200"`
	LaunchLandingPath           *string        `json:"launchLandingPath,omitempty" doc:"A path in the sandbox, starting with /."`
	LaunchBranding              *BrandingPatch `json:"launchBranding,omitempty"`
	LaunchProtected             *bool          `json:"launchProtected,omitempty"`
	LaunchConsentEnabled        *bool          `json:"launchConsentEnabled,omitempty"`
	LaunchConsentLabel          *string        `json:"launchConsentLabel,omitempty"`
	LaunchConsentDefaultChecked *bool          `json:"launchConsentDefaultChecked,omitempty"`
}

// BrandingPatch changes some of a launcher's branding fields.
type BrandingPatch struct {
	Eyebrow            *string `json:"eyebrow,omitempty"`
	Headline           *string `json:"headline,omitempty"`
	Subhead            *string `json:"subhead,omitempty"`
	ButtonLabel        *string `json:"buttonLabel,omitempty"`
	LogoURL            *string `json:"logoUrl,omitempty" doc:"https URL or empty."`
	BrandName          *string `json:"brandName,omitempty"`
	AccentColor        *string `json:"accentColor,omitempty" doc:"Hex colour (#rgb, #rrggbb or #rrggbbaa) or empty."`
	BackgroundColor    *string `json:"backgroundColor,omitempty" doc:"Hex colour or empty."`
	BackgroundImageURL *string `json:"backgroundImageUrl,omitempty" doc:"https URL or empty."`
	HidePoweredBy      *bool   `json:"hidePoweredBy,omitempty"`
}
