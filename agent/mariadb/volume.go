package mariadb

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent/sitedisk"
)

// A site's databases live on the site's own disk, in its volume: a
// directory of that disk (outside everything the site's container
// mounts, the server's user's alone) that the node binds under the
// server's volumes directory, which the server's container sees at
// volumesTarget with slave propagation (a volume attached after the
// server started appears there too). A database placed in a volume is
// an entry of the data directory that is a symbolic link to its
// directory there, which MariaDB follows like any path: its tables'
// files count against the site's disk, and a write past that disk fails
// for that site alone ("The table … is full") while the server goes on
// serving every other. The site's staging database (an import's) lies
// in the same volume, so that taking its tables over is a rename within
// one filesystem.
//
// The links are the node's to make: the server runs with symbolic links
// off, so no tenant can point a table elsewhere (DATA DIRECTORY), and
// root never follows anything a tenant can write: the volume is not in
// the site's container, and the link names a path inside the server's
// own container.

// volumesTarget is where the server's container sees the volumes.
const volumesTarget = "/volumes"

func (s *Server) volumesDir() string { return filepath.Join(s.dir, "volumes") }

func (s *Server) tempDir() string { return filepath.Join(s.dir, "tmp") }

func (s *Server) dataDB() string { return filepath.Join(s.dir, "data", "db") }

// prepareVolumes makes the volumes directory a mount point of its own
// with shared propagation (a peer group of its own, whatever the
// host's mounts are), so that a volume bound under it later reaches the
// server's container.
func (s *Server) prepareVolumes() error {
	d := s.volumesDir()
	// Root's; the server's user passes through to its volumes (each its
	// own) but cannot list them.
	if err := os.MkdirAll(d, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(d, 0o711); err != nil {
		return err
	}
	mounted, err := sitedisk.Mounted(d)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount(d, d, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mariadb: bind %s: %w", d, err)
		}
		if err := unix.Mount("", d, "", unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("mariadb: make %s private: %w", d, err)
		}
	}
	if err := unix.Mount("", d, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("mariadb: make %s shared: %w", d, err)
	}
	return nil
}

// lockDataDir makes the data directory root's, the server's group
// writing in it, with the sticky bit, and every link in it root's: the
// server makes and removes its own files and databases there, but not
// a link that places a database in a volume. A site's account may drop
// its own database (the DROP privilege is DROP TABLE's too); MariaDB
// would remove the link with it, and the next CREATE DATABASE of the
// name (the CREATE privilege is CREATE TABLE's too) would make a plain
// directory there, on the node's disk, bounded by nothing. With the link
// kept, the DROP fails once the tables are gone and the database stays
// in its volume (dropDatabase removes the link itself).
func (s *Server) lockDataDir() error {
	d := s.dataDB()
	if err := os.Chown(d, 0, uid); err != nil {
		return err
	}
	if err := os.Chmod(d, 0o770|fs.ModeSticky); err != nil {
		return err
	}
	data, err := os.OpenRoot(d)
	if err != nil {
		return err
	}
	defer data.Close()
	ents, err := fs.ReadDir(data.FS(), ".")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink != 0 {
			if err := data.Lchown(e.Name(), 0, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// prepareTemp mounts the server's temporary disk (a sparse image of
// TempMaxMB): sort files and on-disk temporary tables of every site go
// there, and a query that needs more fails instead of filling the
// node's disk. It is scratch space, made again at each start of the
// server's host, with the configured size.
func (s *Server) prepareTemp() error {
	d, img := s.tempDir(), filepath.Join(s.dir, "tmp.img")
	mounted, err := sitedisk.Mounted(d)
	if err != nil {
		return err
	}
	if !mounted {
		if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := sitedisk.Ensure(img, s.cfg.TempMaxMB, d); err != nil {
			return fmt.Errorf("mariadb temporary disk: %w", err)
		}
	}
	if err := os.Chown(d, uid, uid); err != nil {
		return err
	}
	return os.Chmod(d, 0o700)
}

// AttachVolume makes dir, a directory on a site's own disk, the volume
// key: the databases placed in it (CreateSiteDatabase, StageDatabase)
// keep their files there. dir must be root's to name and never inside
// what the site's container mounts; it is handed to the server's user.
// Attaching an attached volume does nothing.
func (s *Server) AttachVolume(key, dir string) error {
	if !ident.MatchString(key) {
		return fmt.Errorf("mariadb: invalid volume name %q", key)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("mariadb: volume %s: %w", key, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("mariadb: volume %s: %s is not a directory", key, dir)
	}
	if err := os.Lchown(dir, uid, uid); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	target := filepath.Join(s.volumesDir(), key)
	if mounted, err := sitedisk.Mounted(target); err != nil || mounted {
		return err
	}
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unix.Mount(dir, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mariadb: attach volume %s: %w", key, err)
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		_ = sitedisk.Unmount(target)
		return fmt.Errorf("mariadb: attach volume %s: %w", key, err)
	}
	return nil
}

// DetachVolume drops the databases still placed in volume key and
// unmounts it; a volume not attached is fine.
func (s *Server) DetachVolume(ctx context.Context, key string) error {
	if !ident.MatchString(key) {
		return fmt.Errorf("mariadb: invalid volume name %q", key)
	}
	names, err := s.placedIn(key)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := s.dropDatabase(ctx, n); err != nil {
			return err
		}
	}
	target := filepath.Join(s.volumesDir(), key)
	if err := sitedisk.Unmount(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// link is the data directory's entry for database name in volume.
func link(volume, name string) string { return volumesTarget + "/" + volume + "/" + name }

// placedIn lists the databases whose entries link into volume.
func (s *Server) placedIn(volume string) ([]string, error) {
	ents, err := os.ReadDir(s.dataDB())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink == 0 || !ident.MatchString(e.Name()) {
			continue
		}
		if target, err := os.Readlink(filepath.Join(s.dataDB(), e.Name())); err == nil && target == link(volume, e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// volumeOf is the volume database name is placed in, "" if it is in the
// data directory itself (or not there at all).
func (s *Server) volumeOf(name string) string {
	target, err := os.Readlink(filepath.Join(s.dataDB(), name))
	if err != nil {
		return ""
	}
	vol, ok := strings.CutPrefix(target, volumesTarget+"/")
	if !ok {
		return ""
	}
	vol, rest, _ := strings.Cut(vol, "/")
	if rest != name || !ident.MatchString(vol) {
		return ""
	}
	return vol
}

// errLegacy is a database that is a directory of the data directory
// itself: made by an agent before volumes.
var errLegacy = errors.New("the database lies in the server's data directory")

// place makes the data directory's entry of database name a link to its
// directory in volume (made with its options file, if missing), so that
// CREATE DATABASE makes it there. A database in the data directory
// itself is errLegacy; one linked elsewhere is an error.
func (s *Server) place(name, volume string) error {
	vol := filepath.Join(s.volumesDir(), volume)
	if !ident.MatchString(volume) {
		return fmt.Errorf("mariadb: invalid volume name %q", volume)
	}
	if mounted, err := sitedisk.Mounted(vol); err != nil || !mounted {
		return errors.Join(fmt.Errorf("mariadb: volume %s is not attached", volume), err)
	}
	data, err := os.OpenRoot(s.dataDB())
	if err != nil {
		return err
	}
	defer data.Close()
	fi, err := data.Lstat(name)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		if got, _ := data.Readlink(name); got != link(volume, name) {
			return fmt.Errorf("mariadb: database %s lies in %q, not in volume %s", name, got, volume)
		}
	case err == nil:
		return fmt.Errorf("%s: %w", name, errLegacy)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	// In the volume, through a root that nothing leads out of (the
	// directory is the server's user's).
	root, err := os.OpenRoot(vol)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if di, err := root.Lstat(name); err != nil || !di.IsDir() {
		return errors.Join(fmt.Errorf("mariadb: %s in volume %s is not a directory", name, volume), err)
	}
	if err := root.Lchown(name, uid, uid); err != nil {
		return err
	}
	// The options CREATE DATABASE would have written (it finds the
	// directory there and writes none).
	opt := filepath.Join(name, "db.opt")
	f, err := root.OpenFile(opt, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o660)
	if err == nil {
		_, err = f.WriteString("default-character-set=utf8mb4\ndefault-collation=utf8mb4_unicode_ci\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = root.Lchown(opt, uid, uid)
		}
	} else if errors.Is(err, fs.ErrExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("mariadb: options of %s: %w", name, err)
	}
	if fi == nil { // no entry yet
		// Root's, which the server cannot remove (lockDataDir).
		if err := data.Symlink(link(volume, name), name); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("mariadb: place %s: %w", name, err)
		}
	}
	return nil
}

// dropDatabase drops a database wherever it lies. For a placed one,
// MariaDB drops its tables but cannot remove its link (lockDataDir), so
// its DROP fails: the link goes here, and what is left of its directory
// in the volume. A link the server cannot follow (a volume not
// attached) goes likewise, and so does a link left behind. A DROP that
// failed with tables still there is an error, and nothing is removed.
func (s *Server) dropDatabase(ctx context.Context, name string) error {
	vol := s.volumeOf(name)
	_, err := s.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name))
	if err != nil && vol != "" {
		var left int
		if cerr := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", name).Scan(&left); cerr != nil || left > 0 {
			return errors.Join(fmt.Errorf("drop database %s: %w", name, err), cerr)
		}
		if err := s.unlink(name); err != nil {
			return err
		}
		_, err = s.db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name))
	}
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	if err := s.unlink(name); err != nil {
		return err
	}
	if vol != "" {
		return s.removeLeft(vol, name)
	}
	return nil
}

// removeLeft removes what is left of database name's directory in
// volume, once the database is dropped and its link gone; a volume not
// attached has nothing (its mount point is empty).
func (s *Server) removeLeft(volume, name string) error {
	root, err := os.OpenRoot(filepath.Join(s.volumesDir(), volume))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.RemoveAll(name); err != nil {
		return fmt.Errorf("mariadb: remove what is left of %s: %w", name, err)
	}
	return nil
}

// unlink removes the data directory's entry of name if it is a link.
func (s *Server) unlink(name string) error {
	data, err := os.OpenRoot(s.dataDB())
	if err != nil {
		return err
	}
	defer data.Close()
	if fi, err := data.Lstat(name); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return nil
	}
	if err := data.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("mariadb: unlink %s: %w", name, err)
	}
	return nil
}

// Unmount takes down what New mounted for the server with this
// directory (its volumes, their mount point and its temporary disk),
// once its container is gone: for stopping a node's agent for good.
func Unmount(dir string) error {
	var errs []error
	vols, _ := filepath.Glob(filepath.Join(dir, "volumes", "*"))
	for _, v := range vols {
		errs = append(errs, sitedisk.Unmount(v))
	}
	errs = append(errs, sitedisk.Unmount(filepath.Join(dir, "volumes")), sitedisk.Unmount(filepath.Join(dir, "tmp")))
	return errors.Join(errs...)
}
