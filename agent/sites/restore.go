package sites

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/sandboxd/sandboxd/agent/dumpload"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sitearchive"
	"github.com/sandboxd/sandboxd/internal/urlrewrite"
)

//go:embed files/import-finish.php
var importFinishScript string

// Restorer is what an import needs from the database server.
type Restorer interface {
	StageDatabase(ctx context.Context, volume, staging, user string) error
	DropStaging(ctx context.Context, staging, user string) error
	DetectPrefix(ctx context.Context, db string) (string, error)
	TakeOver(ctx context.Context, staging, site, prefix string) (int, error)
	FirstAdmin(ctx context.Context, db string) (string, error)
}

// streamExec runs a command in a container with stdin from a reader.
type streamExec interface {
	ExecReader(ctx context.Context, id string, argv, env []string, uid, gid uint32, stdin io.Reader) (*runtime.ExecResult, error)
}

// ImportLimits bound what one import may unpack into a site. A dump
// (a "sql" part, or one in an archive) is bounded by MaxFileBytes as it
// is sent and again as it decompresses.
var ImportLimits = sitearchive.DefaultLimits

// ErrPayloadTooLarge refuses an import past one of ImportLimits (a
// dump that decompresses to more than its bound, say): a fixed cap,
// not the site's plan.
var ErrPayloadTooLarge = errors.New("the import is too large")

// RestorePart is one part of an import's stream: an archive or a dump.
type RestorePart struct {
	Kind string // "archive" or "sql"
	Name string
	Size int64
}

// RestoreRequest is an import to restore into a site.
type RestoreRequest struct {
	JobID     string
	SourceURL string
	Parts     []RestorePart
}

// RestoreResult is what a restore did.
type RestoreResult struct {
	Format     string
	Files      int64
	Bytes      int64
	Skipped    int64
	Statements int64
	Tables     int
	Prefix     string
	Rewritten  int64
	AdminLogin string
	Notes      []string
}

// stagingDir is where an import's files are unpacked inside the site's
// WordPress directory (the same mount, so taking its place is a rename).
func stagingDir(jobID string) string {
	sum := sha256.Sum256([]byte(jobID))
	return ".sandbox-import-" + hex.EncodeToString(sum[:6])
}

// RestoreArchive restores an import read from r (the parts in order)
// into a ready site. Files are unpacked by tar inside the site's
// container, as the site's user, into a staging directory; dumps load
// over the site's own database account into a staging database. Only
// when everything is in and its URLs are moved does the staged content
// take the place of the site's; before that a failure (or ctx ending)
// leaves the site as it was. A snapshot of the site under way is waited
// for.
func (m *Manager) RestoreArchive(ctx context.Context, id string, req RestoreRequest, r io.Reader) (*RestoreResult, error) {
	unlock, err := m.LockAwake(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	defer m.replacing(id)()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	if s.UID == 0 || s.Stopped {
		return nil, fmt.Errorf("%w: site %s is not running", ErrInvalid, id)
	}
	db, ok := m.cfg.DB.(Restorer)
	if !ok {
		return nil, errors.New("imports: the database server cannot stage a database")
	}
	ex, ok := m.cfg.Runtime.(streamExec)
	if !ok {
		return nil, errors.New("imports: the runtime cannot stream into a container")
	}
	rw, err := urlrewrite.New(req.SourceURL, s.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: sourceUrl: %v", ErrInvalid, err)
	}
	stage, stagingDB := stagingDir(req.JobID), s.DBName+"_i"
	discard := func() {
		bg := context.WithoutCancel(ctx)
		_, _ = m.Exec(bg, id, []string{"rm", "-rf", "--", "/srv/site/wordpress/" + stage}, nil)
		_ = db.DropStaging(bg, stagingDB, s.DBUser)
	}
	discard() // what an earlier attempt of this job left
	if err := db.StageDatabase(ctx, m.dbVolume(s), stagingDB, s.DBUser); err != nil {
		return nil, err
	}
	// Granted anew: limited again at once if the site is over its plan.
	if err := m.guardDB(ctx, s); err != nil {
		return nil, err
	}
	committed := false
	defer func() {
		if !committed {
			discard()
		}
	}()
	res, err := m.unpack(ctx, s, ex, stage, stagingDB, req, r, rw)
	if err != nil {
		return nil, err
	}
	if res.Prefix == "" {
		if res.Prefix, err = db.DetectPrefix(ctx, stagingDB); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	// The point of no return: the staged database and files take the
	// site's place.
	if res.Tables, err = db.TakeOver(ctx, stagingDB, s.DBName, res.Prefix); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	committed = true
	// The staging database is gone; its grant goes too, or the site's
	// user could make a second database of that name.
	if err := db.DropStaging(context.WithoutCancel(ctx), stagingDB, s.DBUser); err != nil {
		res.Notes = append(res.Notes, "staging cleanup: "+err.Error())
	}
	if err := m.swapContent(context.WithoutCancel(ctx), s, stage, res.Files > 0); err != nil {
		return nil, err
	}
	if notes, err := m.finishImport(context.WithoutCancel(ctx), s); err != nil {
		res.Notes = append(res.Notes, "after the restore: "+err.Error())
	} else {
		res.Notes = append(res.Notes, notes...)
	}
	if res.AdminLogin, err = db.FirstAdmin(context.WithoutCancel(ctx), s.DBName); err != nil {
		return nil, err
	}
	return res, nil
}

// unpack reads the parts: archives' files go through a clean tar into
// the container's tar, dumps into the staging database.
func (m *Manager) unpack(ctx context.Context, s *Site, ex streamExec, stage, stagingDB string, req RestoreRequest, r io.Reader,
	rw *urlrewrite.Rewriter) (*RestoreResult, error) {
	spool := filepath.Join(m.cfg.Dir, "spool")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return nil, err
	}
	conn, closeDB, err := siteConn(ctx, s, m.cfg.DB.Addr(), stagingDB)
	if err != nil {
		return nil, err
	}
	defer closeDB()
	pr, pw := io.Pipe()
	type outcome struct {
		res *runtime.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	dest := "/srv/site/wordpress/" + stage
	go func() {
		res, err := ex.ExecReader(ctx, containerID(s.ID), []string{"/bin/sh", "-c",
			`set -e; mkdir -p "$1/wp-content"; exec tar -x -f - -C "$1/wp-content" --no-same-owner --no-same-permissions --delay-directory-restore`,
			"sh", dest}, nil, uint32(s.UID), uint32(s.UID), pr)
		// Whatever the packer still writes fails now instead of blocking.
		pr.CloseWithError(errors.New("the site's tar has ended"))
		done <- outcome{res, err}
	}()
	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	h := &restoreHandler{ctx: loadCtx, tw: tar.NewWriter(pw), conn: conn, rw: rw, spool: spool,
		dumps: make(chan spooled, 4), loaded: make(chan struct{})}
	go h.loadDumps()
	res := &RestoreResult{}
	var dumps int
	readErr := func() error {
		for i, p := range req.Parts {
			lr := &io.LimitedReader{R: r, N: p.Size}
			switch p.Kind {
			case "archive":
				sum, err := sitearchive.Read(lr, spool, ImportLimits, h)
				if errors.Is(err, sitearchive.ErrTooLarge) || errors.Is(err, ErrPayloadTooLarge) {
					return fmt.Errorf("%w: %s: %v", ErrPayloadTooLarge, partName(p, i), err)
				}
				if err != nil {
					return fmt.Errorf("%w: %s: %v", ErrInvalid, partName(p, i), err)
				}
				if res.Format == "" {
					res.Format = sum.Format
				}
				res.Files += int64(sum.Files)
				res.Skipped += int64(sum.Skipped)
				dumps += len(sum.Dumps)
				if sum.TablePrefix != "" {
					res.Prefix = sum.TablePrefix
				}
				if sum.DBCharset != "" {
					h.charset = sum.DBCharset
				}
			case "sql":
				// A dump on its own may come gzip-compressed (whatever
				// its name says): it is decompressed as it spools.
				err := h.spoolDump(p.Name, lr, true)
				if errors.Is(err, ErrPayloadTooLarge) {
					return fmt.Errorf("%s: %w", partName(p, i), err)
				}
				if err != nil {
					return fmt.Errorf("%w: %s: %v", ErrInvalid, partName(p, i), err)
				}
				dumps++
			default:
				return fmt.Errorf("%w: part %d has kind %q", ErrInvalid, i, p.Kind)
			}
			// What a reader left of its part (a tar's padding) is read,
			// so the next part starts where it should.
			if _, err := io.Copy(io.Discard, lr); err != nil {
				return fmt.Errorf("read %s: %w", partName(p, i), err)
			}
		}
		return nil
	}()
	if readErr == nil {
		readErr = h.tw.Close()
	}
	pw.CloseWithError(readErr)
	if readErr != nil {
		cancelLoad() // the import fails anyway: a dump loading stops
	}
	close(h.dumps)
	<-h.loaded
	if readErr == nil {
		readErr = h.loadErr()
		if err := m.dbError(s.ID, readErr); errors.Is(err, ErrDiskFull) || errors.Is(err, mariadb.ErrFull) {
			readErr = err // the site's disk (or a bound the sites share) is full
		} else if readErr != nil {
			readErr = fmt.Errorf("%w: %v", ErrInvalid, readErr)
		}
	}
	out := <-done
	switch {
	case readErr != nil:
		return nil, readErr
	case out.err != nil:
		return nil, fmt.Errorf("unpack in the site: %w", out.err)
	case out.res.ExitCode != 0:
		if strings.Contains(string(out.res.Stderr), "No space left") {
			return nil, m.DiskFullError(s.ID)
		}
		return nil, fmt.Errorf("%w: unpacking in the site failed: %.400s", ErrInvalid, out.res.Stderr)
	case dumps == 0:
		return nil, fmt.Errorf("%w: the import holds no database dump (a .sql file beside wp-content/)", ErrInvalid)
	}
	res.Bytes, res.Statements, res.Rewritten = h.bytes, h.statements, h.rewritten
	res.Notes = append(res.Notes, h.notes...)
	return res, nil
}

func partName(p RestorePart, i int) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprintf("part %d", i)
}

// siteConn opens a connection to db over the site's own account.
func siteConn(ctx context.Context, s *Site, addr, db string) (*sql.Conn, func(), error) {
	pool, err := sql.Open("mysql", dumpload.DSN(s.DBUser, s.DBPassword, addr, db))
	if err != nil {
		return nil, nil, err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("connect as the site's database user: %w", err)
	}
	return conn, func() { conn.Close(); pool.Close() }, nil
}

// restoreHandler takes an archive's checked entries: files into the
// clean tar the site's tar unpacks, dumps into the staging database.
type restoreHandler struct {
	ctx        context.Context
	tw         *tar.Writer
	conn       *sql.Conn
	spool      string
	dumps      chan spooled
	loaded     chan struct{}
	mu         sync.Mutex
	err        error
	charset    string
	rw         *urlrewrite.Rewriter
	rewritten  int64
	bytes      int64
	statements int64
	notes      []string
}

var _ sitearchive.Handler = (*restoreHandler)(nil)

func (h *restoreHandler) Dir(rel string, mode fs.FileMode) error {
	return h.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: time.Now()})
}

func (h *restoreHandler) File(rel string, mode fs.FileMode, size int64, r io.Reader) error {
	if err := h.loadErr(); err != nil {
		return err // a dump failed: stop reading
	}
	if err := h.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(mode.Perm()), Size: size, ModTime: time.Now()}); err != nil {
		return err
	}
	n, err := io.Copy(h.tw, r)
	h.bytes += n
	return err
}

func (h *restoreHandler) Symlink(rel, target string) error {
	return h.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: rel, Linkname: target, Mode: 0o777, ModTime: time.Now()})
}

func (h *restoreHandler) Hardlink(rel, target string) error {
	return h.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: rel, Linkname: target, ModTime: time.Now()})
}

// SQL spools an archive's dump (sitearchive has decompressed it) and
// queues it: dumps load in order on one connection while the archive's
// files go on unpacking.
func (h *restoreHandler) SQL(name string, r io.Reader) error { return h.spoolDump(name, r, false) }

// spoolDump writes a dump to the node's disk, at most ImportLimits'
// MaxFileBytes of SQL (ErrPayloadTooLarge past it), decompressing it
// first when sniff is set and it is gzip-compressed, and queues it.
func (h *restoreHandler) spoolDump(name string, r io.Reader, sniff bool) error {
	if err := h.loadErr(); err != nil {
		return err
	}
	max := ImportLimits.MaxFileBytes
	if max <= 0 {
		max = sitearchive.DefaultLimits.MaxFileBytes
	}
	what := "dump"
	if sniff {
		br := bufio.NewReaderSize(r, 64<<10)
		if head, _ := br.Peek(2); bytes.Equal(head, []byte{0x1f, 0x8b}) {
			zr, err := gzip.NewReader(br)
			if err != nil {
				return fmt.Errorf("%s is not a gzip stream: %w", name, err)
			}
			defer zr.Close()
			r, what = zr, "decompressed dump"
		} else {
			r = br
		}
	}
	f, err := os.CreateTemp(h.spool, "dump-*.sql")
	if err != nil {
		return fmt.Errorf("spool %s: %w", name, err)
	}
	// One byte past the bound tells "at it" from "over it".
	n, err := io.Copy(f, io.LimitReader(r, max+1))
	if err == nil && n > max {
		err = fmt.Errorf("%w: the %s %s is larger than %d bytes", ErrPayloadTooLarge, what, name, max)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	h.dumps <- spooled{name: name, f: f}
	return nil
}

// spooled is a dump waiting to load.
type spooled struct {
	name string
	f    *os.File
}

// loadDumps loads the queued dumps in order until the queue closes; the
// first error stops the loading (the rest are dropped).
func (h *restoreHandler) loadDumps() {
	defer close(h.loaded)
	for d := range h.dumps {
		if h.loadErr() == nil {
			if err := h.loadOne(d.name, d.f); err != nil {
				h.mu.Lock()
				h.err = fmt.Errorf("%s: %w", d.name, err)
				h.mu.Unlock()
			}
		}
		d.f.Close()
		os.Remove(d.f.Name())
	}
}

func (h *restoreHandler) loadErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// loadOne loads a spooled dump (plain SQL: spool decompressed it).
func (h *restoreHandler) loadOne(name string, r io.Reader) error {
	if h.charset != "" {
		if !charsetRE.MatchString(h.charset) {
			return fmt.Errorf("DB_CHARSET %q is not a character set name", h.charset)
		}
		if _, err := h.conn.ExecContext(h.ctx, "SET NAMES "+h.charset); err != nil {
			return fmt.Errorf("charset %s: %w", h.charset, err)
		}
	}
	// URLs move as the dump streams in: every string literal of its rows
	// that names the old host goes through the rewriter.
	st, err := dumpload.Load(h.ctx, h.conn, r, dumpload.Options{Rewrite: h.rw.Value, RewriteNeedle: strings.ToLower(h.rw.OldHost())})
	h.statements += int64(st.Statements)
	h.rewritten += int64(st.Rewritten)
	if st.Skipped > 0 {
		h.notes = append(h.notes, fmt.Sprintf("%s: %d statements that select or make a database were skipped "+
			"(the dump loads into the site's own database)", name, st.Skipped))
	}
	return err
}

var charsetRE = regexp.MustCompile(`^[A-Za-z0-9_]{1,32}$`)

// swapContent puts the staged wp-content in place of the site's (inside
// the container, as the site's user) with the sandbox's own mu-plugin.
func (m *Manager) swapContent(ctx context.Context, s *Site, stage string, files bool) error {
	script := `set -e; cd /srv/site/wordpress; rm -rf -- "$1"`
	if files {
		script = `set -e; cd /srv/site/wordpress
rm -rf wp-content
mv -- "$1/wp-content" wp-content
rm -rf -- "$1"
mkdir -p wp-content/mu-plugins wp-content/uploads
cp /srv/site/conf/sandbox-mu-plugin.php wp-content/mu-plugins/sandbox.php`
	}
	res, err := m.Exec(ctx, s.ID, []string{"/bin/sh", "-c", script, "sh", stage}, nil)
	if err != nil {
		return fmt.Errorf("put the imported files in place: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("put the imported files in place: %.400s", res.Stderr)
	}
	return nil
}

// finishImport brings the restored database up to the site's WordPress
// (its upgrade routine, as wp-admin would run it) and flushes caches.
func (m *Manager) finishImport(ctx context.Context, s *Site) ([]string, error) {
	code := strings.TrimPrefix(strings.TrimSpace(importFinishScript), "<?php")
	res, err := m.Exec(ctx, s.ID, []string{"php", "-d", "display_errors=stderr", "-r", code}, nil)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("exit %d: %.300s", res.ExitCode, res.Stderr)
	}
	var out struct {
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal(lastLine(res.Stdout), &out); err != nil {
		return nil, fmt.Errorf("bad answer %.200q", res.Stdout)
	}
	return out.Notes, nil
}

// lastLine is the last non-empty line of out (a plugin may print before
// the script's answer).
func lastLine(out []byte) []byte {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return []byte(lines[len(lines)-1])
}
