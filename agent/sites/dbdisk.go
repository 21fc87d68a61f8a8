package sites

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/agent/dbguard"
	"github.com/sandboxd/sandboxd/agent/diskstore"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
)

// A site's database lives on the site's own disk, in its volume (see
// agent/mariadb), so that its plan's disk bounds its files and its
// database together and the node's disk holds no more of it. The disk
// is the plan's size plus a reserve only MariaDB's uid may use: the
// site's files find it full at the plan's size, and the guard
// (agent/dbguard) takes the database's writes away once files and
// database pass it, before InnoDB could ever run out of room (which
// aborts the whole server).

// dbReserveMB is the reserve of a disk of sizeMB: what a statement may
// write between passing the plan and the guard stopping it, and any
// rollback (InnoDB grows a table by up to 4 MiB at a time); ext4 keeps
// at most half a disk in reserve.
func dbReserveMB(sizeMB int64) int64 { return min(max(64, sizeMB/10), sizeMB) }

// ensureDisk makes sure the site's disk is there and mounted; a new one
// gets its database reserve (when a guard is there to hold the database
// under it), recorded in the site's record.
func (m *Manager) ensureDisk(s *Site) error {
	img := filepath.Join(m.FS(s.ID), "disk.img")
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		reserve := int64(0)
		if m.cfg.Guard != nil {
			reserve = dbReserveMB(s.Limits.DiskMB)
		}
		if s.DiskReserveMB != reserve {
			s.DiskReserveMB = reserve
			if err := m.save(s); err != nil {
				return err
			}
		}
	}
	return sitedisk.EnsureReserved(img, s.Limits.DiskMB, sitedisk.Reserve{MB: s.DiskReserveMB, UID: mariadb.UID}, m.Data(s.ID))
}

// dbVolume names a site's database volume in MariaDB, or is "" when its
// database is not on its disk (a disk made by an older agent, or no
// guard).
func (m *Manager) dbVolume(s *Site) string {
	if s.DiskReserveMB <= 0 || m.cfg.Guard == nil {
		return ""
	}
	return s.DBName
}

// mountDisk makes sure the site's disk is mounted and its database
// volume attached.
func (m *Manager) mountDisk(s *Site) error {
	if err := m.ensureDisk(s); err != nil {
		return err
	}
	return m.attachVolume(s)
}

// attachVolume makes the site's database volume on its mounted disk (in
// the disk's root, which is root's: the site never names it) and hands
// it to MariaDB.
func (m *Manager) attachVolume(s *Site) error {
	vol := m.dbVolume(s)
	if vol == "" {
		return nil
	}
	if err := os.Mkdir(m.dbDir(s.ID), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("site database volume: %w", err)
	}
	if err := m.cfg.DB.AttachVolume(vol, m.dbDir(s.ID)); err != nil {
		return fmt.Errorf("site database volume: %w", err)
	}
	return nil
}

// detachVolume stops guarding the site's database and lets its volume
// go (dropping what is left in it).
func (m *Manager) detachVolume(ctx context.Context, s *Site) error {
	vol := m.dbVolume(s)
	if vol == "" {
		return nil
	}
	m.cfg.Guard.Untrack(s.DBUser)
	return m.cfg.DB.DetachVolume(ctx, vol)
}

// guardDB has the guard hold the site's database to its plan (again:
// after its grants were made anew), limiting it at once if it is over.
func (m *Manager) guardDB(ctx context.Context, s *Site) error {
	if m.dbVolume(s) == "" {
		return nil
	}
	err := m.cfg.Guard.Track(ctx, dbguard.Site{User: s.DBUser, Disk: m.Data(s.ID), Volume: m.dbDir(s.ID),
		LimitBytes: s.Limits.DiskMB << 20})
	if err != nil {
		return fmt.Errorf("guard the site's database: %w", err)
	}
	return nil
}

// AttachDisks mounts the disk of every site and attaches its database
// volume: after a host restart, before MariaDB starts (its crash
// recovery may open the sites' tables) and before Reattach.
func (m *Manager) AttachDisks() error {
	var errs []error
	for _, s := range m.List() {
		if s.UID == 0 || s.scratch() {
			continue
		}
		if _, err := os.Stat(filepath.Join(m.FS(s.ID), "disk.img")); errors.Is(err, os.ErrNotExist) {
			continue // never laid out, or torn down: its next provision makes it
		}
		// An agent that stopped in a checkpoint's few milliseconds left
		// the disk mounted and frozen: thawed before anything writes there.
		if mounted, _ := sitedisk.Mounted(m.Data(s.ID)); mounted {
			if err := diskstore.Thaw(m.Data(s.ID)); err != nil {
				errs = append(errs, fmt.Errorf("site %s: %w", s.ID, err))
			}
		}
		if err := m.mountDisk(&s); err != nil {
			errs = append(errs, fmt.Errorf("site %s: %w", s.ID, err))
		}
	}
	return errors.Join(errs...)
}

// DBLimited reports whether the guard took the site's database writes
// away (its disk is over its plan).
func (m *Manager) DBLimited(id string) bool {
	s := m.get(id)
	return s != nil && m.dbVolume(s) != "" && m.cfg.Guard.Limited(s.DBUser)
}

// usage is how full a site's disk is against its plan: the plan's size
// (not the reserve's), what files and database take, and what is free.
func (m *Manager) usage(s *Site) (sitedisk.Usage, error) {
	u, err := sitedisk.UsageOf(m.Data(s.ID))
	if err != nil || s.DiskReserveMB <= 0 {
		return u, err
	}
	u.Size = s.Limits.DiskMB << 20
	// ext4's own free space (less its metadata's and its reserve) can be
	// below what the plan leaves.
	u.Free = min(u.Free, max(0, u.Size-u.Used))
	return u, nil
}

// dbError is err, from MariaDB about a site's database, as the site's
// ErrDiskFull when the site is over its plan (the guard took its writes
// away and ended its statements) or MariaDB had no room on its disk.
// When MariaDB had no room but the disk has, a bound every site of the
// node shares ran out (the undo log, temporary space): that is the
// node's, said as such.
func (m *Manager) dbError(id string, err error) error {
	if err == nil {
		return nil
	}
	s := m.get(id)
	if s == nil {
		return err
	}
	if m.dbVolume(s) != "" && m.cfg.Guard.Limited(s.DBUser) {
		if u, uerr := m.usage(s); uerr == nil {
			return fmt.Errorf("%w: %v", diskFull(u, 0), err)
		}
		return fmt.Errorf("%w: %v", ErrDiskFull, err)
	}
	err = mariadb.Classify(err)
	if !errors.Is(err, mariadb.ErrFull) {
		return err
	}
	u, uerr := m.usage(s)
	if uerr != nil {
		return fmt.Errorf("%w: %v", ErrDiskFull, err)
	}
	if u.Free > max(u.Size/20, dbSlack) {
		return fmt.Errorf("the node's database server has no room for this now (a bound its sites share): %w", err)
	}
	return fmt.Errorf("%w: %v", diskFull(u, 0), err)
}

// dbSlack is the free space below which a site's disk is what stopped
// its database: InnoDB grows a table by up to 4 MiB at a time, and ext4
// keeps some room to itself.
const dbSlack = 16 << 20

// roomForCopy refuses (ErrDiskFull) copying database from into the
// site's when it would not fit under the site's plan. The copy is made
// by MariaDB's own account, which the guard does not limit: it must not
// start what the reserve cannot absorb.
func (m *Manager) roomForCopy(ctx context.Context, cl Cloner, s *Site, from string) error {
	if m.dbVolume(s) == "" {
		return nil
	}
	sizer, ok := cl.(interface {
		DatabaseBytes(ctx context.Context, db string) (int64, error)
	})
	if !ok {
		return nil
	}
	// A template's database never changes once frozen: its size is read
	// once (the read scans every tablespace of the node, thousands on a
	// full one).
	var n int64
	if v, ok := m.sourceBytes.Load(from); ok {
		n = v.(int64)
	} else {
		var err error
		if n, err = sizer.DatabaseBytes(ctx, from); err != nil {
			return err
		}
		m.sourceBytes.Store(from, n)
	}
	u, err := m.usage(s)
	if err != nil {
		return err
	}
	// A copy can come out larger than its source (pages filled in
	// another order): a quarter more, and room for InnoDB's growth.
	if need := n + n/4 + dbSlack; need > u.Free {
		return diskFull(u, need)
	}
	return nil
}
