// Package blueprints is the service behind saved Blueprints: it checks a
// source (package blueprint) against what this service has, adapts it
// when asked, and saves, replaces and deletes a workspace's Blueprints
// with their compatibility report. It takes ids, sources and state
// records, never an HTTP request.
package blueprints

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/blueprintspec"
	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/naming"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	Plans plans.Config
	// Env is what the checks know of this service now (images, fetcher).
	Env func() blueprint.Env
	// Fetch downloads a customer's URL through the address guard, up to
	// max bytes (safefetch).
	Fetch func(ctx context.Context, url string, max int64) ([]byte, error)
	// Zips stores a bundle where every server keeps it (the blob store).
	Zips interface {
		StoreZip(ctx context.Context, zip []byte) (string, error)
		// Drop deletes a stored ZIP nothing uses any more.
		Drop(ctx context.Context, sha string)
	}
	// Sites makes the sites Blueprints run on.
	Sites SiteMaker
	Now   func() time.Time
}

// Service checks and keeps Blueprints.
type Service struct{ cfg Config }

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Env == nil {
		cfg.Env = func() blueprint.Env { return blueprint.Env{} }
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// SchemaVersion is the Blueprint format version saved Blueprints are in.
const SchemaVersion = 1

// Validate checks a source, and adapts it when asked; saved, when set,
// is the Blueprint it belongs to (a bundle's files count); workspaceID,
// when set, the caller's workspace (its Library counts).
func (s *Service) Validate(src []byte, adapt bool, saved *state.Blueprint, workspaceID string) (*blueprintspec.Validation, error) {
	env := s.EnvIn(workspaceID, saved)
	res := blueprint.Check(src, env)
	v := &blueprintspec.Validation{Valid: res.Valid, CompatReport: res.Report}
	if adapt {
		ad, err := blueprint.Adapt(src, env)
		if err != nil {
			return nil, apierr.Invalid("source", "%v", err)
		}
		v.Adapted = &blueprintspec.Adaptation{Source: ad.Source, Changes: ad.Changes, Valid: ad.Result.Valid}
	}
	return v, nil
}

// Import downloads a Blueprint's JSON from a URL without saving it: a
// code host's page URL is fetched in its raw form; a ZIP is refused (it
// is a bundle, for the upload route).
func (s *Service) Import(ctx context.Context, rawURL string) (source []byte, sourceURL string, err error) {
	if len(rawURL) > 4096 {
		return nil, "", apierr.Invalid("url", "url is longer than 4096 characters")
	}
	u, perr := url.Parse(strings.TrimSpace(rawURL))
	if perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, "", apierr.Invalid("url", "url must be an http(s) URL without credentials")
	}
	sourceURL = blueprint.RawURL(u.String())
	if strings.HasSuffix(strings.ToLower(strings.SplitN(sourceURL, "?", 2)[0]), ".zip") {
		return nil, "", zipRefused()
	}
	if s.cfg.Fetch == nil {
		return nil, "", apierr.Unavailable("fetching URLs is not configured")
	}
	body, err := s.cfg.Fetch(ctx, sourceURL, blueprintspec.MaxSource)
	if err != nil {
		return nil, "", apierr.Invalid("url", "%s could not be fetched: %v", sourceURL, err).With("sourceUrl", sourceURL)
	}
	if bytes.HasPrefix(body, []byte("PK\x03\x04")) {
		return nil, "", zipRefused()
	}
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")))
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, "", apierr.Invalid("url", "%s is not a Blueprint's JSON (a JSON object)", sourceURL).With("sourceUrl", sourceURL)
	}
	return trimmed, sourceURL, nil
}

func zipRefused() error {
	return apierr.Invalid("url", "this is a ZIP bundle: upload it with POST /api/app/blueprints/upload (bundle or bundleUrl)")
}

// Upload checks a bundle (the Library's ZIP rules, one blueprint.json,
// bundled files present) and saves its Blueprint with the bundle. When
// the source needs changes to run here, adapted changes are applied; a
// change that needs review is applied only when AdaptationsAccepted,
// else the upload is refused, as is one whose source still cannot run.
// A preview answers what a save would do.
func (s *Service) Upload(ctx context.Context, in blueprintspec.Upload) (*blueprintspec.UploadResult, error) {
	zip, err := s.bundleOf(ctx, in)
	if err != nil {
		return nil, err
	}
	b, err := blueprint.ReadBundle(zip)
	if err != nil {
		return nil, apierr.Invalid("bundle", "%v", err)
	}
	src, err := blueprintspec.Source(b.Source, "bundle")
	if err != nil {
		return nil, err
	}
	env := s.EnvIn(in.Workspace.ID, nil)
	env.Bundle, env.BundleFiles = true, b.Files
	ad, err := blueprint.Adapt(src, env)
	if err != nil {
		return nil, apierr.Invalid("bundle", "blueprint.json: %v", err)
	}
	res := &blueprintspec.UploadResult{}
	chosen := src
	if len(ad.Changes) > 0 {
		res.Adapted = &blueprintspec.Adaptation{Source: ad.Source, Changes: ad.Changes, Valid: ad.Result.Valid}
		if !ad.ReviewRequired() || in.AdaptationsAccepted {
			chosen = ad.Source
		} else if !in.Preview {
			return nil, apierr.Invalid("adaptationsAccepted", "the Blueprint runs here only with changes that need review; "+
				"send adaptationsAccepted=true to accept them (preview=1 lists them)").With("changes", ad.Changes)
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, chosen); err != nil {
		return nil, apierr.Invalid("bundle", "blueprint.json: %v", err)
	}
	chosen = compact.Bytes()
	name := in.Name
	if strings.TrimSpace(name) == "" {
		name = titleOf(chosen)
	}
	if name, err = naming.Name(name); err != nil {
		return nil, err
	}
	desc, err := naming.Description(in.Description)
	if err != nil {
		return nil, err
	}
	now := s.now()
	bp := &state.Blueprint{WorkspaceID: in.Workspace.ID, UserID: in.Workspace.OwnerID, CreatedByUserID: in.By.ID, Name: name,
		Description: desc, SchemaVersion: SchemaVersion, Revision: 1, BundleSizeBytes: int64(len(zip)),
		BundleManifestDirectory: b.ManifestDirectory, CreatedAt: now, UpdatedAt: now}
	s.setSourceIn(bp, chosen, env)
	res.Blueprint = bp
	if in.Preview {
		return res, nil
	}
	if report := blueprint.Check(chosen, env); !report.Valid {
		return nil, apierr.Invalid("bundle", "the Blueprint cannot run here; see details.compatReport").With("compatReport", report.Report)
	}
	if s.cfg.Zips == nil {
		return nil, apierr.Unavailable("bundles cannot be stored")
	}
	// The quota first, so a refused upload stores nothing (the save
	// checks it again, atomically).
	if err := s.roomFor(in.Workspace); err != nil {
		return nil, err
	}
	if bp.BundleSHA256, err = s.cfg.Zips.StoreZip(ctx, zip); err != nil {
		return nil, err
	}
	bp.BundleFiles = b.Files
	saved, err := s.save(ctx, in.Answer, *bp)
	if err != nil {
		s.cfg.Zips.Drop(ctx, bp.BundleSHA256)
		return nil, err
	}
	res.Blueprint = saved
	return res, nil
}

// roomFor refuses a new Blueprint past the owner's quota.
func (s *Service) roomFor(ws *state.Workspace) error {
	plan, err := s.cfg.Store.PlanOf(ws)
	if err != nil {
		return err
	}
	quota, err := s.cfg.Plans.Quota(plan, plans.Blueprints)
	if err != nil {
		return err
	}
	have, err := s.cfg.Store.BlueprintsOwnedBy(ws.OwnerID)
	if err != nil {
		return err
	}
	if quota.Exceeded(have) {
		return &state.QuotaError{Quota: quota}
	}
	return nil
}

// bundleOf is an upload's ZIP, from the request or its URL.
func (s *Service) bundleOf(ctx context.Context, in blueprintspec.Upload) ([]byte, error) {
	switch {
	case len(in.Bundle) > 0 && in.BundleURL != "":
		return nil, apierr.Invalid("bundle", "send a bundle file or a bundleUrl, not both")
	case len(in.Bundle) > 0:
		return in.Bundle, nil
	case in.BundleURL == "":
		return nil, apierr.Invalid("bundle", "a bundle (multipart file part bundle) or a bundleUrl is required")
	}
	u, err := url.Parse(strings.TrimSpace(in.BundleURL))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || len(in.BundleURL) > 4096 {
		return nil, apierr.Invalid("bundleUrl", "bundleUrl must be an http(s) URL without credentials")
	}
	if s.cfg.Fetch == nil {
		return nil, apierr.Unavailable("fetching URLs is not configured")
	}
	raw := blueprint.RawURL(u.String())
	zip, err := s.cfg.Fetch(ctx, raw, blueprint.MaxBundle)
	if err != nil {
		return nil, apierr.Invalid("bundleUrl", "%s could not be fetched: %v", raw, err)
	}
	return zip, nil
}

// titleOf is a source's meta.title, or a default name.
func titleOf(src []byte) string {
	var doc struct {
		Meta struct {
			Title string `json:"title"`
		} `json:"meta"`
	}
	if json.Unmarshal(src, &doc) == nil && strings.TrimSpace(doc.Meta.Title) != "" {
		t := strings.TrimSpace(doc.Meta.Title)
		if len(t) > 100 {
			t = t[:100]
		}
		return strings.ToValidUTF8(t, "")
	}
	return "Uploaded Blueprint"
}

// Create saves a Blueprint with its report, within the owner's quota.
// A source with error findings is saved too: the report says what keeps
// it from running.
func (s *Service) Create(ctx context.Context, in blueprintspec.Create) (*state.Blueprint, error) {
	name, err := naming.Name(in.Name)
	if err != nil {
		return nil, err
	}
	desc, err := naming.Description(in.Description)
	if err != nil {
		return nil, err
	}
	now := s.now()
	b := state.Blueprint{WorkspaceID: in.Workspace.ID, UserID: in.Workspace.OwnerID, CreatedByUserID: in.By.ID,
		Name: name, Description: desc, SchemaVersion: SchemaVersion, Revision: 1, CreatedAt: now, UpdatedAt: now}
	s.setSource(&b, in.Source)
	return s.save(ctx, in.Answer, b)
}

// save adds a new Blueprint under a free slug within the owner's quota.
func (s *Service) save(ctx context.Context, ans *writes.Answer[state.Blueprint], b state.Blueprint) (*state.Blueprint, error) {
	ws, err := s.cfg.Store.Workspace(b.WorkspaceID)
	if err != nil {
		return nil, err
	}
	if ws == nil {
		return nil, fmt.Errorf("workspace %s: %w", b.WorkspaceID, state.ErrNotFound)
	}
	plan, err := s.cfg.Store.PlanOf(ws)
	if err != nil {
		return nil, err
	}
	quota, err := s.cfg.Plans.Quota(plan, plans.Blueprints)
	if err != nil {
		return nil, err
	}
	b.ID = ids.New(ids.Blueprint)
	name := b.Name
	existing, err := s.cfg.Store.BlueprintsOf(b.WorkspaceID)
	if err != nil {
		return nil, err
	}
	taken := map[string]bool{}
	for _, x := range existing {
		taken[x.Slug] = true
	}
	for try := 0; ; try++ {
		b.Slug = naming.Slug(name, "blueprint", taken, try > 0)
		_, err = commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateBlueprint{Blueprint: b, Quota: quota}, b)
		if err == nil || !errors.Is(err, state.ErrConflict) || try == 3 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// setSource sets a Blueprint's source, report and hoisted fields.
func (s *Service) setSource(b *state.Blueprint, src []byte) {
	s.setSourceIn(b, src, s.EnvOf(b))
}

// EnvOf is the check environment of a saved Blueprint: a bundle's
// Blueprint resolves bundled resources among its bundle's files.
func (s *Service) EnvOf(b *state.Blueprint) blueprint.Env {
	if b == nil {
		return s.EnvIn("", nil)
	}
	return s.EnvIn(b.WorkspaceID, b)
}

// EnvIn is the check environment in a workspace (its Library), of a
// saved Blueprint b when not nil.
func (s *Service) EnvIn(workspaceID string, b *state.Blueprint) blueprint.Env {
	env := s.cfg.Env()
	if workspaceID != "" {
		if lib, err := s.cfg.Store.LibraryOf(workspaceID); err == nil && len(lib) > 0 {
			env.Library = map[string]string{}
			for _, e := range lib {
				env.Library[e.Kind+":"+e.Slug] = e.Version
			}
		}
	}
	if b != nil && b.BundleSHA256 != "" {
		env.Bundle, env.BundleFiles = true, b.BundleFiles
		if env.BundleFiles == nil {
			env.BundleFiles = map[string]int64{}
		}
	}
	return env
}

// setSourceIn is setSource checked in env.
func (s *Service) setSourceIn(b *state.Blueprint, src []byte, env blueprint.Env) {
	res := blueprint.Check(src, env)
	report, _ := json.Marshal(res.Report)
	b.Source, b.CompatReport = src, report
	b.HoistedPHPVersion, b.HoistedWordPressVersion, b.HoistedMultisite = "", "", false
	if bp := res.Blueprint; bp != nil {
		b.HoistedPHPVersion, b.HoistedWordPressVersion, b.HoistedMultisite = bp.PHPVersion, bp.WordPressVersion, bp.Multisite
	}
}

// Update applies a PATCH over the Blueprint it read; one that changed
// meanwhile is read again and the PATCH applied to it.
func (s *Service) Update(ctx context.Context, b *state.Blueprint, p blueprintspec.Patch) (*state.Blueprint, error) {
	for try := 0; ; try++ {
		next := *b
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
		if p.Source != nil {
			s.setSource(&next, p.Source)
			next.Revision = b.Revision + 1
		}
		next.UpdatedAt = s.now()
		if !next.UpdatedAt.After(b.UpdatedAt) {
			next.UpdatedAt = b.UpdatedAt.Add(time.Millisecond)
		}
		_, err = s.cfg.Raft.Apply(ctx, fsm.PutBlueprint{Blueprint: next, IfUpdatedAt: b.UpdatedAt})
		switch {
		case err == nil:
			return &next, nil
		case errors.Is(err, state.ErrNotFound):
			return nil, blueprintspec.NotFound()
		case !errors.Is(err, state.ErrStale) || try == 4:
			return nil, err
		}
		if b, err = blueprintspec.In(s.cfg.Store, b.WorkspaceID, b.ID); err != nil {
			return nil, err
		}
	}
}

// Delete removes a saved Blueprint. Templates baked from it keep their
// content.
func (s *Service) Delete(ctx context.Context, b *state.Blueprint) error {
	if _, err := s.cfg.Raft.Apply(ctx, fsm.DeleteBlueprint{ID: b.ID}); err != nil {
		return err
	}
	if b.BundleSHA256 != "" && s.cfg.Zips != nil {
		s.cfg.Zips.Drop(ctx, b.BundleSHA256)
	}
	return nil
}
