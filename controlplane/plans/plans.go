// Package plans holds what each account plan allows and the one check
// every endpoint uses to refuse work beyond it.
package plans

import (
	"fmt"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Resources a plan limits; they are the names in details.resource.
const (
	Sites               = "sites"
	Templates           = "templates"
	Workspaces          = "workspaces"
	APITokens           = "apiTokens"
	MembersPerWorkspace = "membersPerWorkspace"
	LibraryEntries      = "libraryEntries"
	Blueprints          = "blueprints"
	SSHKeys             = "sshKeys"
	// CheckpointsPerSite counts one site's checkpoints.
	CheckpointsPerSite = "checkpoints"
	// SiteDiskMB is no count but a size: each site's disk.
	SiteDiskMB = "siteDiskMb"
)

// Limits are one plan's quotas. Zero means unlimited.
type Limits struct {
	// Sites is the number of live sites across the account's workspaces.
	Sites int `json:"sites"`
	// Templates is the number of templates.
	Templates int `json:"templates"`
	// Workspaces is how many workspaces the account may own, its
	// personal one included.
	Workspaces int `json:"workspaces"`
	// APITokens is how many personal API tokens the account may hold.
	APITokens int `json:"apiTokens"`
	// MembersPerWorkspace counts members and pending invitations of a
	// workspace owned by the account.
	MembersPerWorkspace int `json:"membersPerWorkspace"`
	// LibraryEntries is how many Library entries a workspace owned by
	// the account may hold (each keeps a ZIP of up to 64 MiB).
	LibraryEntries int `json:"libraryEntries"`
	// Blueprints is the number of saved Blueprints across the account's
	// workspaces.
	Blueprints int `json:"blueprints"`
	// SSHKeys is how many SSH public keys the account may hold.
	SSHKeys int `json:"sshKeys"`
	// CheckpointsPerSite is how many checkpoints one site may keep.
	CheckpointsPerSite int `json:"checkpointsPerSite"`
	// SiteDiskMB is each site's disk in MiB: WordPress, uploads, logs and
	// mail. Writes past it fail. Zero leaves the node's default (1024).
	SiteDiskMB int `json:"siteDiskMb"`
	// SiteLifetimeMinutes is how long a site made without
	// expiresInMinutes lives before it is deleted; zero keeps it until it
	// is deleted.
	SiteLifetimeMinutes int `json:"siteLifetimeMinutes"`
	// SleepAfterMinutes is how long a site goes without a request before
	// its node puts it to sleep (it wakes on the next one); zero never.
	SleepAfterMinutes int `json:"sleepAfterMinutes"`
}

func (l Limits) of(resource string) (int, error) {
	switch resource {
	case Sites:
		return l.Sites, nil
	case Templates:
		return l.Templates, nil
	case Workspaces:
		return l.Workspaces, nil
	case APITokens:
		return l.APITokens, nil
	case MembersPerWorkspace:
		return l.MembersPerWorkspace, nil
	case LibraryEntries:
		return l.LibraryEntries, nil
	case Blueprints:
		return l.Blueprints, nil
	case SSHKeys:
		return l.SSHKeys, nil
	case CheckpointsPerSite:
		return l.CheckpointsPerSite, nil
	}
	return 0, fmt.Errorf("plans: unknown resource %q", resource)
}

// Config maps each plan to its limits.
type Config struct {
	Free Limits `json:"free"`
	Paid Limits `json:"paid"`
}

// Default is the addendum's plans: free allows 3 live sites and 3
// templates; the rest are this service's choices, documented in docs/operator.md.
func Default() Config {
	return Config{
		Free: Limits{Sites: 3, Templates: 3, Workspaces: 2, APITokens: 10, MembersPerWorkspace: 5, LibraryEntries: 20, Blueprints: 10, SSHKeys: 10, CheckpointsPerSite: 3, SiteDiskMB: 1024,
			SiteLifetimeMinutes: 7 * 24 * 60, SleepAfterMinutes: 10},
		Paid: Limits{Sites: 500, Templates: 200, Workspaces: 50, APITokens: 100, MembersPerWorkspace: 200, LibraryEntries: 500, Blueprints: 500, SSHKeys: 100, CheckpointsPerSite: 50, SiteDiskMB: 10240,
			SleepAfterMinutes: 30},
	}
}

// Validate reports a config that cannot be used.
func (c Config) Validate() error {
	for name, l := range map[string]Limits{"free": c.Free, "paid": c.Paid} {
		if l.Sites < 0 || l.Templates < 0 || l.Workspaces < 0 || l.APITokens < 0 || l.MembersPerWorkspace < 0 || l.LibraryEntries < 0 || l.Blueprints < 0 || l.SSHKeys < 0 || l.CheckpointsPerSite < 0 {
			return fmt.Errorf("plans: %s limits must not be negative", name)
		}
		if l.SiteLifetimeMinutes < 0 || l.SiteLifetimeMinutes > 525600 {
			return fmt.Errorf("plans: %s siteLifetimeMinutes must be 0 (no limit) to 525600 (a year)", name)
		}
		if l.SleepAfterMinutes < 0 || l.SleepAfterMinutes > 43200 {
			return fmt.Errorf("plans: %s sleepAfterMinutes must be 0 (never) to 43200 (a month)", name)
		}
		if l.SiteDiskMB != 0 && (l.SiteDiskMB < 64 || l.SiteDiskMB > 1<<20) {
			return fmt.Errorf("plans: %s siteDiskMb must be 0 (the node's default) or 64 to 1048576", name)
		}
	}
	return nil
}

// For returns a plan's limits.
func (c Config) For(plan string) Limits {
	if plan == state.PlanPaid {
		return c.Paid
	}
	return c.Free
}

// Quota is the cap on resource for plan, to carry in a write command so
// the limit is enforced atomically where the write is applied.
func (c Config) Quota(plan, resource string) (state.Quota, error) {
	limit, err := c.For(plan).of(resource)
	if err != nil {
		return state.Quota{}, err
	}
	return state.Quota{Plan: plan, Resource: resource, Limit: limit}, nil
}

// Error is the 402 plan_limit_reached for an exceeded quota, with details
// plan, limit and resource: the one error every plan limit answers.
func Error(q state.Quota) error {
	return apierr.PlanLimit(q.Plan, q.Resource, q.Limit)
}
