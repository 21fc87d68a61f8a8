// Package jobspec names the control plane's job types and the payloads
// they carry: the contract between the code that queues a job (the
// services under the API) and the code that runs it (sitejobs). It is a
// leaf: both import it, it imports neither.
package jobspec

// Job types, as clients see them in GET /api/app/jobs/{id}.
const (
	CreateSite = "create_site"
	DeleteSite = "delete_site"
	ResetSite  = "reset_site"
	// UpdatePHPConfig applies php.ini overrides; the site keeps serving.
	UpdatePHPConfig = "update_php_config"
	// SwitchPHPVersion moves a site to another runtime, or leaves it.
	SwitchPHPVersion = "switch_php_version"
	// DeployPlugin installs a plugin or theme ZIP into a ready site.
	DeployPlugin = "deploy_plugin"
	// SnapshotTemplate freezes a ready site into a template; the job's
	// site is the source.
	SnapshotTemplate = "snapshot_template"
	// RestoreSite replaces a site's content with a template's.
	RestoreSite = "restore_site"
	// ApplyBlueprint runs a Blueprint on a ready site.
	ApplyBlueprint = "apply_blueprint"
	// BakeBlueprint makes a scratch site, runs a Blueprint on it, freezes
	// it into a template and removes it.
	BakeBlueprint = "bake_blueprint"
	// ImportRestore restores an import's archive into its site (making
	// the site first when the import asked for a new one).
	ImportRestore = "import_restore"
	// SetSiteDomain moves a site's WordPress to its custom domain, or
	// back to its sandbox URL: whichever the site's domain wants when the
	// job runs.
	SetSiteDomain = "set_site_domain"
	// GitDeploy fetches a connected repository's branch on the site's
	// node and places its tree at the repository's destination.
	GitDeploy = "git_deploy"
	// SnapshotSite copies a running site's files and database to the
	// blob store (on a schedule, or when an operator asks).
	SnapshotSite = "snapshot_site"
	// MoveSite moves a site to another node with its id, URL and data:
	// from the running site (a drain), or from its latest snapshot (its
	// node lost).
	MoveSite = "move_site"
	// RestoreCheckpoint puts a site back as it was at one of its
	// checkpoints, keeping its id and URL.
	RestoreCheckpoint = "restore_checkpoint"
	// ForkSite makes a new site (the job's) a copy of a running site of
	// the same node.
	ForkSite = "fork_site"
)

// Types is every job type, in the order the document lists them. The
// API's enum of job types is taken from here; a server test checks that
// the types with a runner are exactly these.
var Types = []string{CreateSite, DeleteSite, ResetSite, RestoreSite, SwitchPHPVersion, UpdatePHPConfig, DeployPlugin,
	SnapshotTemplate, GitDeploy, ImportRestore, ApplyBlueprint, BakeBlueprint, SetSiteDomain, SnapshotSite, MoveSite,
	RestoreCheckpoint, ForkSite}

// CheckpointPayload is what a restore_checkpoint job carries.
type CheckpointPayload struct {
	CheckpointID string `json:"checkpointId"`
}

// ForkPayload is what a fork_site job carries besides the new site's
// row: the site it copies, and the new site's plan.
type ForkPayload struct {
	SourceSiteID      string `json:"sourceSiteId"`
	AdminEmail        string `json:"adminEmail"`
	DiskMB            int    `json:"diskMb,omitempty"`
	SleepAfterSeconds int64  `json:"sleepAfterSeconds,omitempty"`
}

// SnapshotPayload is what a snapshot_site job carries.
type SnapshotPayload struct {
	Reason string `json:"reason"` // schedule, operator or drain
}

// MovePayload is what a move_site job carries (the move itself is in
// the site's record).
type MovePayload struct {
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// GitDeployPayload is what a git_deploy job carries.
type GitDeployPayload struct {
	RepositoryID string `json:"repositoryId"`
	// Trigger is manual or push; a push names its commit and delivery.
	Trigger    string `json:"trigger"`
	SHA        string `json:"sha,omitempty"`
	DeliveryID string `json:"deliveryId,omitempty"`
}

// DomainPayload is what a set_site_domain job carries: the domain it was
// queued for (the job converges on the domain's state when it runs).
type DomainPayload struct {
	Hostname   string `json:"hostname"`
	Disconnect bool   `json:"disconnect,omitempty"`
}

// RunPayload is what an apply_blueprint job carries.
type RunPayload struct {
	RunID string `json:"runId"`
}

// TemplatePayload is what snapshot_template and restore_site jobs carry.
type TemplatePayload struct {
	TemplateID string `json:"templateId"`
}

// SwitchPayload is what a switch_php_version job carries.
type SwitchPayload struct {
	PHPVersion string `json:"phpVersion"`
}

// PHPConfigPayload is what an update_php_config job carries.
type PHPConfigPayload struct {
	Settings map[string]string `json:"settings"`
}

// CreatePayload is what a create_site job carries besides the site row.
type CreatePayload struct {
	AdminUser        string `json:"adminUser"`
	AdminEmail       string `json:"adminEmail"`
	WordPressVersion string `json:"wordpressVersion,omitempty"`
	// DiskMB is the site's disk, from its owner's plan; 0 is the node's
	// default.
	DiskMB int `json:"diskMb,omitempty"`
	// SleepAfterSeconds is the plan's idle time before the site sleeps:
	// 0 the node's default, below 0 never.
	SleepAfterSeconds int64 `json:"sleepAfterSeconds,omitempty"`
	// Pooled makes a site that waits in a warm pool (dozing, until
	// claimed).
	Pooled bool `json:"pooled,omitempty"`
	// TemplateID makes the site a clone of this template instead of a
	// fresh install.
	TemplateID string `json:"templateId,omitempty"`
	// RunID is the Blueprint run the job carries out once the site is
	// ready (a site made from a Blueprint, or a bake).
	RunID string `json:"runId,omitempty"`
	// ImportID is the import an import_restore job restores once the
	// site is ready.
	ImportID string `json:"importId,omitempty"`
}

// DeployPayload is what a deploy_plugin job carries: the ZIP by its blob
// name, never its bytes, or the URL the job fetches it from.
type DeployPayload struct {
	BlobSHA256 string `json:"blobSha256,omitempty"`
	// ZipURL is fetched by the job, not the request that queued it: a slow
	// or large download holds a worker, never an API connection. A job
	// run again after a leader change fetches it again.
	ZipURL   string `json:"zipUrl,omitempty"`
	Activate bool   `json:"activate"`
	// Source says where the ZIP came from: library:<slug>, url or upload.
	Source string `json:"source"`
}
