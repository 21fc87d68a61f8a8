package state

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Blueprint run statuses, and step statuses (which add skipped).
const (
	RunPending   = "pending"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	StepSkipped  = "skipped"
)

// Blueprint run modes.
const (
	RunCreate = "create"
	RunApply  = "apply"
	RunBake   = "bake"
)

// BlueprintRun is one execution of a Blueprint on a site: the source as
// it was when the run started, and each step's outcome.
type BlueprintRun struct {
	ID              string `json:"id"`
	BlueprintID     string `json:"blueprintId"` // empty for a source applied without saving
	WorkspaceID     string `json:"orgId"`
	CreatedByUserID string `json:"createdByUserId"`
	// BlueprintRevision is the revision run (0 for an unsaved source).
	BlueprintRevision int       `json:"blueprintRevision"`
	SiteID            string    `json:"siteId"`
	JobID             string    `json:"jobId"`
	Mode              string    `json:"mode"`
	Status            string    `json:"status"`
	Steps             []RunStep `json:"steps"`
	Log               string    `json:"log"`
	RunnerVersion     string    `json:"runnerVersion"`
	FailureReason     string    `json:"failureReason"`
	// Source is the Blueprint run; BundleSHA256 its bundle's blob, which
	// bundled resources are read from.
	Source       json.RawMessage `json:"source,omitempty"`
	BundleSHA256 string          `json:"bundleSha256,omitempty"`
	// TemplateID is the template a bake makes; ReplacesTemplateID the one
	// a rebake retires once that template is ready.
	TemplateID         string `json:"templateId,omitempty"`
	ReplacesTemplateID string `json:"replacesTemplateId,omitempty"`
	// LoginUser and LandingPage are where the Blueprint's login and
	// landingPage put a visitor (recorded as the run gets there).
	LoginUser   string     `json:"loginUser,omitempty"`
	LandingPage string     `json:"landingPage,omitempty"`
	StartedAt   *time.Time `json:"startedAt"`
	FinishedAt  *time.Time `json:"finishedAt"`
	CreatedAt   time.Time  `json:"createdAt"`
}

// RunStep is one step's outcome in a run.
type RunStep struct {
	Name       string `json:"name"`
	Status     string `json:"status"`
	DurationMs int64  `json:"durationMs"`
	Caption    string `json:"caption"`
	// Path is where the step came from in the source (steps[2], login).
	Path string `json:"path"`
}

// Terminal reports whether the run has ended.
func (r *BlueprintRun) Terminal() bool { return r.Status == RunSucceeded || r.Status == RunFailed }

// BlueprintRun returns a run by id, or nil.
func (s *Store) BlueprintRun(id string) (*BlueprintRun, error) {
	return first[BlueprintRun](s.read(), tableRuns, "id", id)
}

// RunsOf lists a Blueprint's runs, newest first.
func (s *Store) RunsOf(blueprintID string) ([]*BlueprintRun, error) {
	out, err := all[BlueprintRun](s.read(), tableRuns, "blueprint", blueprintID)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	return out, err
}

// CreateRun adds a run; its id must be new. A saved Blueprint keeps its
// KeptRuns newest finished runs: older ones go as a new one starts.
func (t *Tx) CreateRun(r BlueprintRun) error {
	return t.run(func(tx *memdb.Txn) error {
		if dup, err := first[BlueprintRun](tx, tableRuns, "id", r.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: run id %s exists", ErrConflict, r.ID)
		}
		if err := insert(tx, tableRuns, &r); err != nil {
			return err
		}
		if r.BlueprintID == "" {
			return nil
		}
		_, err := trimRuns(tx, r.BlueprintID)
		return err
	})
}

// PutRun records a run's progress. A finished run stays finished, and a
// run keeps its identity (blueprint, workspace, site, mode, source); a
// record without a source keeps the stored one.
func (t *Tx) PutRun(r BlueprintRun) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[BlueprintRun](tx, tableRuns, "id", r.ID)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: run %s", ErrNotFound, r.ID)
		}
		if old.Terminal() {
			return fmt.Errorf("%w: run %s has finished", ErrConflict, r.ID)
		}
		if r.Source == nil {
			r.Source = old.Source // progress records leave the source out
		}
		if old.BlueprintID != r.BlueprintID || old.WorkspaceID != r.WorkspaceID || old.SiteID != r.SiteID || old.Mode != r.Mode ||
			string(old.Source) != string(r.Source) || !old.CreatedAt.Equal(r.CreatedAt) {
			return fmt.Errorf("%w: a run keeps its Blueprint, workspace, site, mode and source", ErrConflict)
		}
		return insert(tx, tableRuns, &r)
	})
}
