package state

import (
	"fmt"
	"slices"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Repository is a Git repository connected to a site: what is deployed
// from it, where, how it authenticates, and the secrets that go with it,
// sealed (the Raft log and snapshots never hold them in the clear).
type Repository struct {
	ID          string `json:"id"`
	SiteID      string `json:"siteId"`
	WorkspaceID string `json:"workspaceId"`
	RepoURL     string `json:"repoUrl"`
	Branch      string `json:"branch"`
	// Destination is plugin, theme or wp-content; FolderName the
	// directory under plugins/ or themes/.
	Destination string `json:"destination"`
	FolderName  string `json:"folderName"`
	// AuthKind is https (TokenSealed optional) or ssh (a deploy key made
	// for the repository: DeployKeyPublic shown, DeployKeySealed never).
	AuthKind        string `json:"authKind"`
	TokenSealed     []byte `json:"tokenSealed,omitempty"`
	DeployKeyPublic string `json:"deployKeyPublic,omitempty"`
	DeployKeySealed []byte `json:"deployKeySealed,omitempty"`
	AutoDeploy      bool   `json:"autoDeploy"`
	// WebhookSecretSealed keys the push webhook (its URL and the
	// providers' signatures).
	WebhookSecretSealed []byte     `json:"webhookSecretSealed"`
	LastDeployedSHA     string     `json:"lastDeployedSha,omitempty"`
	LastDeployedAt      *time.Time `json:"lastDeployedAt,omitempty"`
	// Deliveries are the ids of the latest push deliveries taken, so a
	// replayed one deploys nothing.
	Deliveries      []string  `json:"deliveries,omitempty"`
	CreatedByUserID string    `json:"createdByUserId"`
	CreatedAt       time.Time `json:"createdAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
}

// keptDeliveryIDs is how many push deliveries a repository remembers.
const keptDeliveryIDs = 100

// MaxRepositoriesPerSite bounds the repositories of one site.
const MaxRepositoriesPerSite = 20

// Repository returns a repository by id, or nil.
func (s *Store) Repository(id string) (*Repository, error) {
	return first[Repository](s.read(), tableRepos, "id", id)
}

// SiteRepositories lists a site's repositories.
func (s *Store) SiteRepositories(siteID string) ([]*Repository, error) {
	return all[Repository](s.read(), tableRepos, "site", siteID)
}

// CreateRepository connects a repository to a site of the same workspace.
func (t *Tx) CreateRepository(r Repository) error {
	return t.run(func(tx *memdb.Txn) error {
		site, err := first[Site](tx, tableSites, "id", r.SiteID)
		if err != nil {
			return err
		}
		if site == nil || site.WorkspaceID != r.WorkspaceID || site.Status == SiteDeleting {
			return fmt.Errorf("%w: site %s", ErrNotFound, r.SiteID)
		}
		mine, err := all[Repository](tx, tableRepos, "site", r.SiteID)
		if err != nil {
			return err
		}
		if len(mine) >= MaxRepositoriesPerSite {
			return fmt.Errorf("%w: a site has at most %d repositories", ErrInvalid, MaxRepositoriesPerSite)
		}
		return insert(tx, tableRepos, &r)
	})
}

// PutRepository replaces a repository's settings (branch, folder,
// auto-deploy) as its writer read it at ifUpdatedAt (ErrStale otherwise).
func (t *Tx) PutRepository(r Repository, ifUpdatedAt time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Repository](tx, tableRepos, "id", r.ID)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: repository %s", ErrNotFound, r.ID)
		}
		if !old.UpdatedAt.Equal(ifUpdatedAt) {
			return ErrStale
		}
		return insert(tx, tableRepos, &r)
	})
}

// DeleteRepository disconnects a repository.
func (t *Tx) DeleteRepository(id string) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Repository](tx, tableRepos, "id", id)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: repository %s", ErrNotFound, id)
		}
		return remove(tx, tableRepos, old)
	})
}

// RecordDeploy stamps the commit a deploy placed.
func (t *Tx) RecordDeploy(id, sha string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Repository](tx, tableRepos, "id", id)
		if err != nil || old == nil {
			return err
		}
		c := *old
		c.LastDeployedSHA, c.LastDeployedAt, c.UpdatedAt = sha, &at, at
		return insert(tx, tableRepos, &c)
	})
}

// TakePush records a push delivery and queues its deploy, once: a
// delivery id seen before is refused with ErrConflict (a replay).
func (t *Tx) TakePush(id, delivery string, job Job) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Repository](tx, tableRepos, "id", id)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: repository %s", ErrNotFound, id)
		}
		if delivery != "" && slices.Contains(old.Deliveries, delivery) {
			return fmt.Errorf("%w: delivery %s was taken already", ErrConflict, delivery)
		}
		c := *old
		if delivery != "" {
			c.Deliveries = append(slices.Clone(old.Deliveries), delivery)
			if n := len(c.Deliveries); n > keptDeliveryIDs {
				c.Deliveries = c.Deliveries[n-keptDeliveryIDs:]
			}
		}
		if err := t.CreateJob(job); err != nil {
			return err
		}
		return insert(tx, tableRepos, &c)
	})
}

// reposGone drops a deleted site's repositories.
func reposGone(tx *memdb.Txn, siteID string) error {
	rs, err := all[Repository](tx, tableRepos, "site", siteID)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := remove(tx, tableRepos, r); err != nil {
			return err
		}
	}
	return nil
}
