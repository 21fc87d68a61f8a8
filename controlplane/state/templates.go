package state

import (
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Template statuses.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

// LaunchBranding is how a template's public launcher looks.
type LaunchBranding struct {
	Eyebrow            string `json:"eyebrow"`
	Headline           string `json:"headline"`
	Subhead            string `json:"subhead"`
	ButtonLabel        string `json:"buttonLabel"`
	LogoURL            string `json:"logoUrl"`
	BrandName          string `json:"brandName"`
	AccentColor        string `json:"accentColor"`
	BackgroundColor    string `json:"backgroundColor"`
	BackgroundImageURL string `json:"backgroundImageUrl"`
	HidePoweredBy      bool   `json:"hidePoweredBy"`
}

// Launch is a template's public launch link settings.
type Launch struct {
	Enabled               bool           `json:"enabled"`
	Token                 string         `json:"token,omitempty"`
	Count                 int            `json:"count"`
	QuotaMode             string         `json:"quotaMode"`
	EntryMode             string         `json:"entryMode"`
	ExpirationMode        string         `json:"expirationMode"`
	ExpirationMinutes     int            `json:"expirationMinutes"`
	LandingPath           string         `json:"landingPath"`
	Branding              LaunchBranding `json:"branding"`
	Protected             bool           `json:"protected"`
	ConsentEnabled        bool           `json:"consentEnabled"`
	ConsentLabel          string         `json:"consentLabel"`
	ConsentDefaultChecked bool           `json:"consentDefaultChecked"`
}

// Template is a frozen site (files and database) that sites are made
// from. Its artifact (blob ArtifactSHA256) lets any node restore it; the
// node that froze it keeps the tree.
type Template struct {
	ID               string `json:"id"`
	WorkspaceID      string `json:"orgId"`
	UserID           string `json:"userId"` // the workspace owner, whose plan counts it
	CreatedByUserID  string `json:"createdByUserId"`
	Name             string `json:"name"`
	Slug             string `json:"slug"`
	Description      string `json:"description"`
	SourceSiteID     string `json:"sourceSiteId"`
	Status           string `json:"status"`
	FailureReason    string `json:"failureReason"`
	WordPressVersion string `json:"wordpressVersion"`
	PHPVersion       string `json:"phpVersion"`
	SizeBytes        int64  `json:"sizeBytes"`
	// ArtifactSHA256 is the blob of the files and SQL; NodeID the node
	// holding the frozen tree.
	ArtifactSHA256          string `json:"artifactSha256,omitempty"`
	NodeID                  string `json:"nodeId,omitempty"`
	WarmPoolSize            int    `json:"warmPoolSize"`
	Launch                  Launch `json:"launch"`
	SourceBlueprintID       string `json:"sourceBlueprintId,omitempty"`
	SourceBlueprintRevision int    `json:"sourceBlueprintRevision,omitempty"`
	// Entry is the login entry sites made from the template start with.
	Entry SiteEntry `json:"entry,omitzero"`
	// Build names the frozen files and database (on nodes, in the
	// artifact) when they are not the template's own id: a rebake swaps
	// a rebuilt build in under the same id (BuildID).
	Build string `json:"build,omitempty"`
	// RebuildOf, on a template being rebaked, is the ready template it
	// will replace: such a row is internal (the API shows the template it
	// rebuilds) until ReplaceTemplate folds it into that one.
	RebuildOf string    `json:"rebuildOf,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// BuildID is the id the template's frozen files and database are known
// by on nodes and in its artifact.
func (t *Template) BuildID() string {
	if t.Build != "" {
		return t.Build
	}
	return t.ID
}

// Template returns a template by id, or nil.
func (s *Store) Template(id string) (*Template, error) {
	return first[Template](s.read(), tableTemplates, "id", id)
}

// TemplatesOf lists a workspace's templates, oldest first (then by id).
func (s *Store) TemplatesOf(workspaceID string) ([]*Template, error) {
	out, err := all[Template](s.read(), tableTemplates, "workspace", workspaceID)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, err
}

// CreateTemplateWithJob adds a building template within its owner's
// quota (templates across the owner's workspaces) and queues the job
// that freezes it, atomically.
func (t *Tx) CreateTemplateWithJob(tpl Template, job Job, q Quota) error {
	if err := t.CreateTemplate(tpl, q); err != nil {
		return err
	}
	return t.CreateJob(job)
}

// CreateTemplate adds a building template within its owner's quota; its
// id and slug must be new.
func (t *Tx) CreateTemplate(tpl Template, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		if w, err := first[Workspace](tx, tableWorkspaces, "id", tpl.WorkspaceID); err != nil {
			return err
		} else if w == nil {
			return fmt.Errorf("%w: workspace %s", ErrNotFound, tpl.WorkspaceID)
		}
		if dup, err := first[Template](tx, tableTemplates, "id", tpl.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: template id %s exists", ErrConflict, tpl.ID)
		}
		if dup, err := first[Template](tx, tableTemplates, "slug", tpl.WorkspaceID, tpl.Slug); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: the slug %q is taken in this workspace", ErrConflict, tpl.Slug)
		}
		have, err := all[Template](tx, tableTemplates, "user", tpl.UserID)
		if err != nil {
			return err
		}
		if err := q.check(len(have)); err != nil {
			return err
		}
		return insert(tx, tableTemplates, &tpl)
	})
}

// PutTemplate replaces a template with the same id (a PATCH, or a job
// recording its outcome); workspace, owner and slug never change. With
// ifUpdatedAt set, the template must not have changed since (its
// UpdatedAt is that): a read-modify-write that lost a race is refused
// with ErrStale, never applied over the other write.
func (t *Tx) PutTemplate(tpl Template, ifUpdatedAt *time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Template](tx, tableTemplates, "id", tpl.ID)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: template %s", ErrNotFound, tpl.ID)
		}
		if ifUpdatedAt != nil && !old.UpdatedAt.Equal(*ifUpdatedAt) {
			return fmt.Errorf("%w: template %s changed meanwhile", ErrStale, tpl.ID)
		}
		if old.WorkspaceID != tpl.WorkspaceID || old.UserID != tpl.UserID || old.Slug != tpl.Slug {
			return fmt.Errorf("%w: a template keeps its workspace, owner and slug", ErrConflict)
		}
		if old.Launch.Token != "" && tpl.Launch.Token != old.Launch.Token {
			return fmt.Errorf("%w: a template's launch token never changes", ErrConflict)
		}
		// Launches own the count: a PATCH that read the template before a
		// launch does not write the older count back.
		tpl.Launch.Count = old.Launch.Count
		return insert(tx, tableTemplates, &tpl)
	})
}

// DeleteTemplate removes a template; a missing one is fine. Sites made
// from it keep their own copies.
func (t *Tx) DeleteTemplate(id string) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Template](tx, tableTemplates, "id", id)
		if err != nil || old == nil {
			return err
		}
		return tx.Delete(tableTemplates, old)
	})
}

// TemplateArtifacts lists the blobs of every template's artifact: every
// server keeps them, so a template outlives its node.
func (s *Store) TemplateArtifacts() ([]string, error) {
	ts, err := all[Template](s.read(), tableTemplates, "id")
	var out []string
	for _, t := range ts {
		if t.ArtifactSHA256 != "" {
			out = append(out, t.ArtifactSHA256)
		}
	}
	return out, err
}

// TemplateByLaunchToken returns the template a launch token belongs to,
// or nil.
func (s *Store) TemplateByLaunchToken(token string) (*Template, error) {
	if token == "" {
		return nil, nil
	}
	return first[Template](s.read(), tableTemplates, "launch", token)
}

// TemplateByBuild returns the template whose current build is id, or nil
// (a build a rebake replaced belongs to no template any more).
func (s *Store) TemplateByBuild(id string) (*Template, error) {
	t, err := s.Template(id)
	if err != nil || (t != nil && t.BuildID() == id) {
		return t, err
	}
	ts, err := s.AllTemplates()
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if t.Build == id {
			return t, nil
		}
	}
	return nil, nil
}

// AllTemplates lists every template of every workspace.
func (s *Store) AllTemplates() ([]*Template, error) {
	return all[Template](s.read(), tableTemplates, "id")
}

// ReplaceTemplate folds a ready rebuild into the template it rebuilds:
// the template keeps its id, slug, launch settings and token, warm pool,
// leads and demos, and takes the rebuild's build (files and database),
// versions, name, description and login entry; the rebuild's row goes.
// The old build is collected on nodes once no site uses it, as for a
// deleted template.
func (t *Tx) ReplaceTemplate(oldID, newID string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Template](tx, tableTemplates, "id", oldID)
		if err != nil {
			return err
		}
		next, err := first[Template](tx, tableTemplates, "id", newID)
		if err != nil {
			return err
		}
		switch {
		case old == nil:
			return fmt.Errorf("%w: template %s", ErrNotFound, oldID)
		case next == nil:
			return fmt.Errorf("%w: template %s", ErrNotFound, newID)
		case old.WorkspaceID != next.WorkspaceID || old.ID == next.ID:
			return fmt.Errorf("%w: a template is replaced by another of its workspace", ErrConflict)
		case next.Status != TemplateReady:
			return fmt.Errorf("%w: template %s is not ready", ErrConflict, newID)
		}
		n := *old
		n.Build, n.RebuildOf = next.BuildID(), ""
		n.Name, n.Description, n.Status, n.FailureReason = next.Name, next.Description, TemplateReady, ""
		n.WordPressVersion, n.PHPVersion, n.SizeBytes = next.WordPressVersion, next.PHPVersion, next.SizeBytes
		n.ArtifactSHA256, n.NodeID, n.SourceSiteID, n.Entry = next.ArtifactSHA256, next.NodeID, next.SourceSiteID, next.Entry
		n.SourceBlueprintID, n.SourceBlueprintRevision = next.SourceBlueprintID, next.SourceBlueprintRevision
		n.UpdatedAt = at
		if err := tx.Delete(tableTemplates, next); err != nil {
			return err
		}
		return insert(tx, tableTemplates, &n)
	})
}
