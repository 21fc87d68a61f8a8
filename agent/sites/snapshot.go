package sites

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sitearchive"
)

// Snapshot errors, apart from ErrNotFound.
var (
	// ErrNotRunning refuses what needs the site's container running.
	ErrNotRunning = errors.New("the site is not running")
	// ErrTooLarge is a snapshot past its bound, or one its restore would
	// refuse for its size.
	ErrTooLarge = errors.New("the snapshot is too large")
)

// DefaultSnapshotMax bounds a snapshot (both parts, as sent) whose caller
// sets no bound; a site whose disk and 1 GiB for its database come to
// more gets that instead.
const DefaultSnapshotMax = 8 << 30

// SnapshotInfo is what a snapshot sent.
type SnapshotInfo struct {
	// FilesBytes and DatabaseBytes are the parts' sizes as written: the
	// compressed tar and the SQL text.
	FilesBytes, DatabaseBytes int64
	// TakenAt is the moment the database was read at; the files were
	// read after it.
	TakenAt time.Time
	// Entries counts the tar's entries; Dropped those left out (links
	// that leave wp-content, FIFOs and other special files), which a
	// restore would refuse.
	Entries, Dropped int64
}

// streamOut runs a command in a container with its stdout streamed.
type streamOut interface {
	ExecStream(ctx context.Context, id string, argv, env []string, uid, gid uint32, stdin io.Reader, stdout io.Writer) (*runtime.ExecResult, error)
}

// snapshotTar archives wp-content in the site's container, as the site's
// user. A link is archived as a link (never followed, wp-content itself
// included); a hard link's file is archived again in full, so the
// archive holds no hard links; a file the site cannot read, or that
// vanishes on the way, is left out.
var snapshotTar = []string{"tar", "-c", "-f", "-", "-C", "/srv/site/wordpress", "--format=posix", "--hard-dereference",
	"--ignore-failed-read", "--", "wp-content"}

// Snapshot writes a snapshot of a running site without stopping it: its
// wp-content as a zstd-compressed tar to files (entries wp-content/…, as
// an import archive holds them), then its database as SQL text to
// database: the two parts RestoreArchive takes back (an "archive" and an
// "sql" part). The database is read at one moment (a consistent read of
// every InnoDB table) before the files, which are read meanwhile, by tar
// inside the site's container as the site's user: the snapshot sees only
// what the site itself can read. files is flushed (if it is a
// *bufio.Writer or has Flush) before the database is written. limit bounds
// both parts together as written (0: DefaultSnapshotMax or the site's
// disk). The site's lock is held only to look the site up; a restore or
// reset of the site waits for the snapshot, everything else goes on.
// When ctx ends, the tar and the dump stop.
func (m *Manager) Snapshot(ctx context.Context, id string, files, database io.Writer, limit int64) (*SnapshotInfo, error) {
	s, release, err := m.startSnapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	ex, ok := m.cfg.Runtime.(streamOut)
	if !ok {
		return nil, errors.New("snapshots: the runtime cannot stream out of a container")
	}
	if limit <= 0 {
		limit = max(DefaultSnapshotMax, s.Limits.DiskMB<<20+1<<30)
	}
	b := &budget{max: limit}
	fw, dw := &budgetWriter{b: b, w: files}, &budgetWriter{b: b, w: database}
	conn, closeDB, err := siteConn(ctx, s, m.cfg.DB.Addr(), s.DBName)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	defer closeDB()
	info := &SnapshotInfo{}
	info.TakenAt, err = mariadb.DumpSQL(ctx, conn, func() error {
		if err := m.snapshotFiles(ctx, s, ex, fw, info); err != nil {
			return err
		}
		return flush(files)
	}, dw)
	if err == nil {
		err = flush(database)
	}
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrTooLarge) {
			if now := m.get(id); now == nil || now.Stopped {
				return nil, fmt.Errorf("snapshot of %s: %w: it was stopped or deleted during the snapshot (%v)", id, ErrNotRunning, err)
			}
		}
		return nil, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	info.FilesBytes, info.DatabaseBytes = fw.n, dw.n
	if info.Dropped > 0 {
		m.log.Warn("snapshot left out entries a restore would refuse", "site_id", id, "dropped", info.Dropped)
	}
	return info, nil
}

// startSnapshot checks, under the site's lock, that the site runs here
// and takes its content guard, shared: the lock itself is let go at once.
func (m *Manager) startSnapshot(ctx context.Context, id string) (_ *Site, _ func(), err error) {
	// A sleeping site is woken (its files are read inside its container)
	// and goes back to sleep after: a snapshot is no traffic.
	hold, err := m.HoldQuiet(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			hold()
		}
	}()
	defer m.Lock(id)()
	s := m.get(id)
	switch {
	case s == nil:
		return nil, nil, fmt.Errorf("%w: no site %s on this node", ErrNotFound, id)
	case s.UID <= 0:
		return nil, nil, fmt.Errorf("%w: site %s was made by an older agent; delete and recreate it", ErrInvalid, id)
	case s.Stopped:
		return nil, nil, fmt.Errorf("%w: site %s is stopped; start it to snapshot it", ErrNotRunning, id)
	}
	running, err := m.cfg.Runtime.Running(ctx, containerID(id))
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	if !running {
		return nil, nil, fmt.Errorf("%w: the container of site %s is not running", ErrNotRunning, id)
	}
	g := m.contentGuard(id)
	g.RLock()
	return s, func() { g.RUnlock(); hold() }, nil
}

// replacing takes a site's content guard alone, for what replaces the
// site's files and database wholesale (a restore, a reset): it waits for
// the snapshots under way, and none starts until it is done. The caller
// holds the site's lock.
func (m *Manager) replacing(id string) func() {
	g := m.contentGuard(id)
	g.Lock()
	return g.Unlock
}

// snapshotFiles streams the site's tar through a check into a zstd
// stream written to w.
func (m *Manager) snapshotFiles(ctx context.Context, s *Site, ex streamOut, w io.Writer, info *SnapshotInfo) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	type outcome struct {
		res *runtime.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := ex.ExecStream(ctx, containerID(s.ID), snapshotTar, nil, uint32(s.UID), uint32(s.UID), nil, pw)
		if err != nil {
			pw.CloseWithError(err)
		} else {
			pw.Close()
		}
		done <- outcome{res, err}
	}()
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		pr.CloseWithError(err)
		<-done
		return err
	}
	// A failure to write the snapshot (w, its bound) is the answer, and
	// tar is ended for it; anything else is reading the tar, which tar's
	// own outcome explains first.
	wm := &writeMarker{w: zw}
	copyErr := copySnapshotTar(pr, wm, ImportLimits, info)
	ours := copyErr != nil && (wm.err != nil || errors.Is(copyErr, ErrTooLarge))
	if copyErr == nil {
		if copyErr = zw.Close(); copyErr != nil {
			ours = true
		}
	} else {
		zw.Reset(io.Discard) // lets go of its blocks; w gets nothing more
	}
	if copyErr == nil {
		// What follows the archive's end is tar's padding: read (bounded)
		// so that tar can finish.
		if n, err := io.Copy(io.Discard, io.LimitReader(pr, 1<<20)); err != nil {
			copyErr = err
		} else if n == 1<<20 {
			copyErr = errors.New("the site's tar went on after the archive's end")
		}
	}
	// Whatever tar still writes fails now, which ends it.
	pr.CloseWithError(errors.New("the snapshot stopped reading"))
	out := <-done
	switch {
	case ours:
		return copyErr
	case out.err != nil:
		return fmt.Errorf("tar in the site: %w", out.err)
	case out.res.ExitCode > 1: // 1: a file changed while it was read
		return fmt.Errorf("tar in the site failed (exit %d): %.400s", out.res.ExitCode, out.res.Stderr)
	case copyErr != nil:
		return fmt.Errorf("read the site's tar: %w", copyErr)
	}
	return nil
}

// writeMarker keeps the first error of writing to w.
type writeMarker struct {
	w   io.Writer
	err error
}

func (m *writeMarker) Write(p []byte) (int, error) {
	n, err := m.w.Write(p)
	if err != nil && m.err == nil {
		m.err = err
	}
	return n, err
}

// copySnapshotTar copies the site's tar from r to a tar of its own
// written to w, checking every entry: names under wp-content (a stream
// that holds anything else is refused), the counts and sizes a restore
// takes (lim), and links that stay inside wp-content. Links that leave
// it and special files are left out (counted as Dropped): a restore
// refuses them, and nothing but the link itself is ever read. Only
// names, permission bits, sizes, times, data and link targets are
// copied.
func copySnapshotTar(r io.Reader, w io.Writer, lim sitearchive.Limits, info *SnapshotInfo) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	var total int64
	root := false // wp-content itself was seen
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		info.Entries++
		if info.Entries > int64(lim.MaxEntries) {
			return fmt.Errorf("%w: wp-content holds more than %d entries, more than a restore takes", ErrTooLarge, lim.MaxEntries)
		}
		name, ok := snapshotName(hdr.Name)
		if !ok {
			return fmt.Errorf("entry %q is not under wp-content", hdr.Name)
		}
		out := &tar.Header{Name: name, Mode: hdr.Mode & 0o777, ModTime: hdr.ModTime}
		switch {
		case name == "wp-content" && hdr.Typeflag != tar.TypeDir:
			return errors.New("wp-content is not a directory")
		case hdr.Typeflag == tar.TypeDir:
			out.Typeflag, out.Name = tar.TypeDir, name+"/"
			root = root || name == "wp-content"
		case hdr.Typeflag == tar.TypeReg:
			if hdr.Size > lim.MaxFileBytes {
				return fmt.Errorf("%w: %s is %d bytes, over the %d a restore takes in one file", ErrTooLarge, name, hdr.Size, lim.MaxFileBytes)
			}
			if total += hdr.Size; total > lim.MaxBytes {
				return fmt.Errorf("%w: wp-content holds more than %d bytes, more than a restore takes", ErrTooLarge, lim.MaxBytes)
			}
			out.Typeflag, out.Size = tar.TypeReg, hdr.Size
		case hdr.Typeflag == tar.TypeSymlink && sitearchive.LinkStaysInside(name, hdr.Linkname):
			out.Typeflag, out.Linkname, out.Mode = tar.TypeSymlink, hdr.Linkname, 0o777
		default:
			info.Dropped++
			continue
		}
		if err := tw.WriteHeader(out); err != nil {
			return fmt.Errorf("write the snapshot's tar: %s: %w", name, err)
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("copy %s: %w", name, err)
			}
		}
	}
	if !root {
		return errors.New("the site has no wp-content")
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write the snapshot's tar: %w", err)
	}
	return nil
}

// snapshotName checks a name of the site's tar: wp-content or a clean
// relative path under it, returned without a trailing slash.
func snapshotName(name string) (string, bool) {
	name = strings.TrimSuffix(name, "/")
	comps := strings.Split(name, "/")
	if comps[0] != "wp-content" {
		return "", false
	}
	for _, c := range comps {
		if c == "" || c == "." || c == ".." || strings.IndexByte(c, 0) >= 0 {
			return "", false
		}
	}
	return name, true
}

// budget is what a snapshot's parts may still write, together.
type budget struct {
	max, used int64
}

// budgetWriter writes one part against the budget and counts its bytes.
type budgetWriter struct {
	b *budget
	w io.Writer
	n int64
}

func (bw *budgetWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > bw.b.max-bw.b.used {
		return 0, fmt.Errorf("%w: it would be over its bound of %d bytes", ErrTooLarge, bw.b.max)
	}
	n, err := bw.w.Write(p)
	bw.b.used += int64(n)
	bw.n += int64(n)
	return n, err
}

// flush flushes w if it buffers.
func flush(w io.Writer) error {
	if f, ok := w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}
