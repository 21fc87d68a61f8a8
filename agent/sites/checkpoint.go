package sites

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/diskstore"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
)

// A checkpoint is a site's disk (its files and its database's volume)
// cloned by reference at one moment, with what its database's tables
// were: it costs the blocks the site changes afterwards, and a restore
// puts the clone back under the site and takes its tables back in
// (agent/mariadb's transportable tablespaces). Checkpoints lie on the
// node, beside the sites' disks (fs/.checkpoints/SITE/ID.img and .json,
// root's), outlive a reset or a restore of the site, and go with it.

// Tablespaces is what checkpoints and forks need from the database
// server: its tables quiesced for a copy of their files, and such a copy
// taken back in.
type Tablespaces interface {
	Export(ctx context.Context, db string) ([]mariadb.Table, func() error, error)
	Import(ctx context.Context, volume, db string, tables []mariadb.Table) error
}

// Checkpoint is a site's files and database at one moment.
type Checkpoint struct {
	ID        string    `json:"id"`
	SiteID    string    `json:"siteId"`
	CreatedAt time.Time `json:"createdAt"`
	// What the site was: the template its tree lay over, the URL its
	// content names, its WordPress; and its database's tables.
	Template         string          `json:"template,omitempty"`
	TemplateURL      string          `json:"templateUrl,omitempty"`
	Stock            bool            `json:"stock,omitempty"`
	WordPressVersion string          `json:"wordpressVersion"`
	URL              string          `json:"url"`
	DBName           string          `json:"dbName"`
	Tables           []mariadb.Table `json:"tables"`
	// Reflink says the clone shares the site's blocks (else it is a copy).
	Reflink bool `json:"reflink"`
	// SizeBytes is what the checkpoint holds that nothing else does, as
	// of when it was read (not stored).
	SizeBytes int64 `json:"-"`
}

// ErrCheckpointNotFound is a checkpoint the site does not have.
var ErrCheckpointNotFound = errors.New("checkpoint not found")

var checkpointIDRE = regexp.MustCompile(`^cp_[a-z0-9]{4,40}$`)

func (m *Manager) checkpointsDir(site string) string {
	return filepath.Join(m.cfg.Dir, "fs", ".checkpoints", site)
}

func (m *Manager) checkpointPath(site, id, ext string) string {
	return filepath.Join(m.checkpointsDir(site), id+ext)
}

// diskImage is the site's disk image.
func (m *Manager) diskImage(id string) string { return filepath.Join(m.FS(id), "disk.img") }

// checkCheckpointable refuses a site a checkpoint or a fork cannot copy.
func (m *Manager) checkCheckpointable(s *Site) error {
	switch {
	case s == nil:
		return ErrNotFound
	case s.UID <= 0:
		return fmt.Errorf("%w: site %s was made by an older agent; delete and recreate it", ErrInvalid, s.ID)
	case m.dbVolume(s) == "":
		return fmt.Errorf("%w: the database of site %s is not on its disk (a site made by an older agent): reset it first", ErrInvalid, s.ID)
	}
	if _, ok := m.cfg.DB.(Tablespaces); !ok {
		return errors.New("sites: the database server cannot export tables")
	}
	if !m.cloning {
		return fmt.Errorf("%w: this node keeps sites' disks where they cannot be cloned by reference (an XFS or btrfs data "+
			"directory, or mkfs.xfs for a store of its own): it makes no checkpoints or forks", ErrUnavailable)
	}
	return nil
}

// ErrUnavailable is what this node cannot do now or at all (no room on
// its disk, no way to clone disks).
var ErrUnavailable = errors.New("unavailable on this node")

// ErrCheckpointsFull refuses a checkpoint of a site whose checkpoints
// hold as much of their own as the site's disk is large.
var ErrCheckpointsFull = errors.New("the site's checkpoints hold as much as its disk")

// minFree is the room a node keeps on the filesystem under its sites'
// disks: a checkpoint, fork or restore that would leave less is refused
// (the disks are sparse: what they may still grow to is not reserved).
func minFree(size int64) int64 { return max(4<<30, size/20) }

// roomOnNode refuses work that adds to the sites' store when the
// filesystem under it, or the store itself, is nearly full.
func (m *Manager) roomOnNode() error {
	for _, p := range []string{m.cfg.Dir, filepath.Join(m.cfg.Dir, "fs")} {
		free, size, err := diskstore.Free(p)
		if err != nil {
			return err
		}
		if free < minFree(size) {
			return fmt.Errorf("%w: the node's disk has %d MiB free, under its reserve of %d MiB", ErrUnavailable, free>>20, minFree(size)>>20)
		}
	}
	return nil
}

// checkpointBudget refuses a new checkpoint of s when its checkpoints
// already hold, of their own, as much as its disk's size: one site
// cannot pin more than twice its plan's disk on its node.
func (m *Manager) checkpointBudget(s *Site) error {
	recs, _ := filepath.Glob(filepath.Join(m.checkpointsDir(s.ID), "cp_*.img"))
	var held int64
	for _, r := range recs {
		n, err := diskstore.Exclusive(r)
		if err != nil {
			return err
		}
		held += n
	}
	if held >= s.Limits.DiskMB<<20 {
		return fmt.Errorf("%w: its checkpoints hold %d MiB of their own (the site's disk is %d MiB): delete one", ErrCheckpointsFull,
			held>>20, s.Limits.DiskMB)
	}
	return nil
}

// cloneLive clones the disk of site s, which may be serving, to dst:
// its tables quiesced (their changes written out, writes waiting), its
// filesystem written out and frozen for the clone's few milliseconds.
// It returns the tables and whether the clone is a reflink.
func (m *Manager) cloneLive(ctx context.Context, s *Site, dst string) (_ []mariadb.Table, reflink bool, err error) {
	tables, unlock, err := m.cfg.DB.(Tablespaces).Export(ctx, s.DBName)
	if err != nil {
		return nil, false, m.dbError(s.ID, err)
	}
	defer func() { err = errors.Join(err, unlock()) }()
	if mounted, merr := sitedisk.Mounted(m.Data(s.ID)); merr != nil {
		return nil, false, merr
	} else if mounted {
		thaw, ferr := diskstore.Freeze(m.Data(s.ID))
		if ferr != nil {
			return nil, false, ferr
		}
		// The clone takes milliseconds; whatever happens to it, the site's
		// filesystem does not stay frozen past freezeBound.
		watchdog := time.AfterFunc(freezeBound, func() {
			m.log.Warn("a checkpoint's freeze ran past its bound: thawed", "site_id", s.ID)
			_ = thaw()
		})
		defer func() { watchdog.Stop(); err = errors.Join(err, thaw()) }()
	}
	reflink, err = diskstore.Clone(dst, m.diskImage(s.ID))
	if err != nil {
		return nil, false, err
	}
	return tables, reflink, nil
}

// freezeBound is the longest a site's filesystem stays frozen for a
// clone (which takes milliseconds).
const freezeBound = 10 * time.Second

// MakeCheckpoint checkpoints a site under id (cp_…); one already made
// under that id is returned as it is.
func (m *Manager) MakeCheckpoint(ctx context.Context, siteID, id string) (*Checkpoint, error) {
	if !checkpointIDRE.MatchString(id) {
		return nil, fmt.Errorf("%w: checkpoint id %q", ErrInvalid, id)
	}
	unlock, err := m.lockPinned(ctx, siteID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := m.get(siteID)
	if err := m.checkCheckpointable(s); err != nil {
		return nil, err
	}
	if cp, err := m.readCheckpoint(siteID, id); err == nil {
		return cp, nil
	}
	if err := m.roomOnNode(); err != nil {
		return nil, err
	}
	if err := m.checkpointBudget(s); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(m.checkpointsDir(siteID), 0o700); err != nil {
		return nil, err
	}
	img := m.checkpointPath(siteID, id, ".img")
	t0 := time.Now()
	tables, reflink, err := m.cloneLive(ctx, s, img)
	if err != nil {
		return nil, fmt.Errorf("checkpoint of %s: %w", siteID, err)
	}
	cp := &Checkpoint{ID: id, SiteID: siteID, CreatedAt: time.Now().UTC(), Template: s.Template, TemplateURL: s.TemplateURL,
		Stock: s.Stock, WordPressVersion: s.WordPressVersion, URL: s.URL, DBName: s.DBName, Tables: tables, Reflink: reflink}
	b, err := json.Marshal(cp)
	if err == nil {
		err = writeAtomic(m.checkpointPath(siteID, id, ".json"), b)
	}
	if err != nil {
		os.Remove(img)
		return nil, fmt.Errorf("checkpoint of %s: %w", siteID, err)
	}
	m.log.Info("checkpoint made", "site_id", siteID, "checkpoint_id", id, "tables", len(tables), "reflink", reflink,
		"ms", time.Since(t0).Milliseconds())
	return cp, nil
}

// writeAtomic writes a root-only file under a temporary name and
// renames it into place.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// readCheckpoint reads one checkpoint's record (an image without one is
// a checkpoint cut short: not there).
func (m *Manager) readCheckpoint(siteID, id string) (*Checkpoint, error) {
	if !checkpointIDRE.MatchString(id) {
		return nil, ErrCheckpointNotFound
	}
	b, err := os.ReadFile(m.checkpointPath(siteID, id, ".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrCheckpointNotFound
	}
	if err != nil {
		return nil, err
	}
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if cp.ID != id || cp.SiteID != siteID {
		return nil, fmt.Errorf("checkpoint %s: its record names %s of %s", id, cp.ID, cp.SiteID)
	}
	return &cp, nil
}

// Checkpoints lists a site's checkpoints, newest first, each with what
// it holds of its own.
func (m *Manager) Checkpoints(siteID string) ([]Checkpoint, error) {
	if m.get(siteID) == nil {
		return nil, ErrNotFound
	}
	recs, _ := filepath.Glob(filepath.Join(m.checkpointsDir(siteID), "cp_*.json"))
	out := make([]Checkpoint, 0, len(recs))
	for _, r := range recs {
		cp, err := m.readCheckpoint(siteID, filepath.Base(r[:len(r)-len(".json")]))
		if err != nil {
			return nil, err
		}
		if cp.SizeBytes, err = diskstore.Exclusive(m.checkpointPath(siteID, cp.ID, ".img")); err != nil {
			return nil, err
		}
		out = append(out, *cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, nil
}

// DeleteCheckpoint removes one of a site's checkpoints; one not there is
// fine.
func (m *Manager) DeleteCheckpoint(siteID, id string) error {
	if !checkpointIDRE.MatchString(id) {
		return fmt.Errorf("%w: checkpoint id %q", ErrInvalid, id)
	}
	defer m.Lock(siteID)()
	for _, ext := range []string{".json", ".img", ".img.part"} {
		if err := os.Remove(m.checkpointPath(siteID, id, ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// removeCheckpoints removes every checkpoint of a site (it is deleted).
func (m *Manager) removeCheckpoints(siteID string) error {
	return os.RemoveAll(m.checkpointsDir(siteID))
}

// RestoreCheckpoint puts a site back as it was at a checkpoint, keeping
// its id, URL, address and uid: the checkpoint's clone becomes its disk,
// its tables are taken back in (its URL moved to the site's, if it has
// changed since) and the site is started again and answers. The
// checkpoint stays. A failure before the site is stopped leaves it as it
// was; one after leaves a restore to try again.
func (m *Manager) RestoreCheckpoint(ctx context.Context, siteID, id string) (*Site, error) {
	unlock, err := m.lockPinned(ctx, siteID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	defer m.replacing(siteID)()
	s := m.get(siteID)
	if err := m.checkCheckpointable(s); err != nil {
		return nil, err
	}
	cp, err := m.readCheckpoint(siteID, id)
	if err != nil {
		return nil, err
	}
	if err := m.roomOnNode(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	next := m.diskImage(siteID) + ".next"
	_ = os.Remove(next)
	if _, err := diskstore.Clone(next, m.checkpointPath(siteID, id, ".img")); err != nil {
		return nil, err
	}
	defer os.Remove(next)
	// Down: its container, its database (the server lets its files go),
	// its tree and its disk.
	if err := m.cfg.Runtime.Stop(ctx, containerID(siteID), 2*time.Second); err != nil {
		return nil, err
	}
	if err := m.detachVolume(ctx, s); err != nil {
		return nil, err
	}
	if err := m.unmountTree(s); err != nil {
		return nil, err
	}
	if err := sitedisk.Unmount(m.Data(siteID)); err != nil {
		return nil, err
	}
	if err := os.Rename(next, m.diskImage(siteID)); err != nil {
		return nil, err
	}
	t1 := time.Now()
	s.Template, s.TemplateURL, s.Stock, s.WordPressVersion = cp.Template, cp.TemplateURL, cp.Stock, cp.WordPressVersion
	if err := m.save(s); err != nil {
		return nil, err
	}
	if err := m.takeTables(ctx, s, cp.Tables, cp.URL); err != nil {
		return nil, err
	}
	t2 := time.Now()
	if err := m.start(ctx, s); err != nil {
		return nil, err
	}
	m.log.Info("checkpoint restored", "site_id", siteID, "checkpoint_id", id, "disk_ms", t1.Sub(t0).Milliseconds(),
		"database_ms", t2.Sub(t1).Milliseconds(), "start_ms", time.Since(t2).Milliseconds())
	return m.get(siteID), nil
}

// takeTables mounts a site's disk, which holds a copy's database files
// in its volume, and makes them the site's database: made again (its
// account's password set), the tables imported, the guard holding it,
// and its URL moved from the copy's (from) to the site's.
func (m *Manager) takeTables(ctx context.Context, s *Site, tables []mariadb.Table, from string) error {
	if err := m.mountDisk(s); err != nil {
		return err
	}
	if err := m.cfg.DB.CreateSiteDatabase(ctx, m.dbVolume(s), s.DBName, s.DBUser, s.DBPassword); err != nil {
		return m.dbError(s.ID, err)
	}
	if err := m.cfg.DB.(Tablespaces).Import(ctx, m.dbVolume(s), s.DBName, tables); err != nil {
		return m.dbError(s.ID, err)
	}
	if err := m.guardDB(ctx, s); err != nil {
		return err
	}
	if from != s.URL {
		cl, ok := m.cfg.DB.(Cloner)
		if !ok {
			return errors.New("sites: the database server cannot rewrite URLs")
		}
		rw, err := rewriter(from, s.URL)
		if err != nil {
			return err
		}
		if _, err := cl.RewriteURLs(ctx, s.DBName, rw); err != nil {
			return m.dbError(s.ID, err)
		}
	}
	return nil
}

// start writes a site's files, mounts its tree, attaches its namespace,
// runs its container and waits until it answers.
func (m *Manager) start(ctx context.Context, s *Site) error {
	if err := m.writeFiles(s); err != nil {
		return fmt.Errorf("site files: %w", err)
	}
	if err := m.mountTree(s); err != nil {
		return err
	}
	netns, err := m.attach(ctx, s)
	if err != nil {
		return err
	}
	s.Stopped = false
	if err := m.save(s); err != nil {
		return err
	}
	if err := m.cfg.Runtime.Run(ctx, m.spec(s, netns)); err != nil {
		return err
	}
	return m.waitReady(ctx, s)
}

// TemplateUser names a site, or a site's checkpoint, whose tree lies
// over template id (so the template's tree must stay); "" when none.
func (m *Manager) TemplateUser(id string) string {
	for _, s := range m.List() {
		if s.Template == id {
			return "site " + s.ID
		}
		recs, _ := filepath.Glob(filepath.Join(m.checkpointsDir(s.ID), "cp_*.json"))
		for _, r := range recs {
			cp, err := m.readCheckpoint(s.ID, strings.TrimSuffix(filepath.Base(r), ".json"))
			if err == nil && cp.Template == id {
				return "checkpoint " + cp.ID + " of site " + s.ID
			}
		}
	}
	return ""
}
