package sites

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
)

// Fork makes site r a copy of site src, which runs on this node, and
// waits until it answers: src's disk cloned by reference (src quiesced
// for milliseconds, serving throughout), its files handed to r's uid,
// its tables taken in as r's own database under r's own account, every
// URL in it moved to r's. r runs src's PHP over src's template (a reset
// of r goes back there). A retry starts the copy over.
func (m *Manager) Fork(ctx context.Context, srcID string, r CreateRequest) (*Site, error) {
	src := m.get(srcID)
	if err := m.checkCheckpointable(src); err != nil {
		return nil, fmt.Errorf("fork of %s: %w", srcID, err)
	}
	r.PHPVersion = src.PHPVersion
	if err := validate(&r); err != nil {
		return nil, err
	}
	if r.ID == srcID {
		return nil, fmt.Errorf("%w: a site cannot be forked into itself", ErrInvalid)
	}
	if err := m.roomOnNode(); err != nil {
		return nil, err
	}
	defer m.Lock(r.ID)()
	s, err := m.record(ctx, r)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	// A retry: what the last attempt made goes first.
	if err := m.teardownDisk(ctx, s); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(m.FS(s.ID), 0o711); err != nil {
		return nil, err
	}
	tables, from, err := m.forkDisk(ctx, srcID, s)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	if err := m.ensureDisk(s); err != nil {
		return nil, err
	}
	if err := m.adopt(s, from.UID, from.DBName); err != nil {
		return nil, fmt.Errorf("fork of %s: %w", srcID, err)
	}
	if err := m.takeTables(ctx, s, tables, from.URL); err != nil {
		return nil, err
	}
	t2 := time.Now()
	if err := m.start(ctx, s); err != nil {
		return nil, err
	}
	m.log.Info("site forked", "site_id", s.ID, "source_id", srcID, "disk_ms", t1.Sub(t0).Milliseconds(),
		"database_ms", t2.Sub(t1).Milliseconds(), "start_ms", time.Since(t2).Milliseconds())
	return m.get(s.ID), nil
}

// forkDisk clones the source's disk into s's, under the source's lock,
// and makes s's record the source's sort of site (its template, PHP
// image, disk). It returns the tables and the source as it was.
func (m *Manager) forkDisk(ctx context.Context, srcID string, s *Site) (_ []mariadb.Table, from Site, _ error) {
	unlock, err := m.lockPinned(ctx, srcID)
	if err != nil {
		return nil, from, err
	}
	defer unlock()
	src := m.get(srcID)
	if err := m.checkCheckpointable(src); err != nil {
		return nil, from, fmt.Errorf("fork of %s: %w", srcID, err)
	}
	from = *src
	tables, _, err := m.cloneLive(ctx, src, m.diskImage(s.ID))
	if err != nil {
		return nil, from, fmt.Errorf("fork of %s: %w", srcID, err)
	}
	s.Template, s.TemplateURL, s.Stock, s.WordPressVersion = src.Template, src.TemplateURL, src.Stock, src.WordPressVersion
	s.Image, s.DiskReserveMB, s.Limits.DiskMB = src.Image, src.DiskReserveMB, src.Limits.DiskMB
	s.PHPConfig, s.Debug = src.PHPConfig, src.Debug
	return tables, from, m.save(s)
}

// teardownDisk takes down what a site's disk holds up (its container,
// database, tree) and removes its image: for a make that starts over.
func (m *Manager) teardownDisk(ctx context.Context, s *Site) error {
	if err := m.cfg.Runtime.Remove(ctx, containerID(s.ID)); err != nil {
		return err
	}
	if err := m.cfg.DB.DropSiteDatabase(ctx, s.DBName, s.DBUser); err != nil {
		return err
	}
	if s.DiskReserveMB > 0 && m.cfg.Guard != nil {
		if err := m.detachVolume(ctx, s); err != nil {
			return err
		}
	}
	if err := m.unmountTree(s); err != nil {
		return err
	}
	if err := sitedisk.Unmount(m.Data(s.ID)); err != nil {
		return err
	}
	if err := os.Remove(m.diskImage(s.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// adopt makes a cloned disk s's: what the source's uid owned is s's
// (through a root no link leads out of, links themselves changed, never
// followed), the source's database directory is s's, and the mail and
// logs the source had are not carried over.
func (m *Manager) adopt(s *Site, fromUID int, fromDB string) error {
	root, err := os.OpenRoot(m.Data(s.ID))
	if err != nil {
		return err
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "mariadb" || p == "lost+found" {
			return fs.SkipDir
		}
		if path.Dir(p) == "mail" || path.Dir(p) == "logs" {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if owner(fi) == fromUID {
			return root.Lchown(p, s.UID, s.UID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("hand the copy to the site's uid: %w", err)
	}
	if fromDB != s.DBName {
		db, err := os.OpenRoot(m.dbDir(s.ID))
		if err != nil {
			return err
		}
		defer db.Close()
		if err := db.Rename(fromDB, s.DBName); err != nil {
			return fmt.Errorf("the copy's database: %w", err)
		}
	}
	return nil
}

// owner is a file's owner uid.
func owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
