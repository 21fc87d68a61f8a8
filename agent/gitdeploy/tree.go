package gitdeploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Tree is a fetched commit's files, checked and bounded. Its content
// stays in the repository's cache: WriteTar reads it from there, so a
// Tree is meant to be written soon after its Fetch (a later fetch of the
// same repository may prune it: ErrGone).
type Tree struct {
	// SHA is the fetched commit: the one to record as deployed.
	SHA string
	// Time is the commit's committer time (the files' times in the tar).
	Time time.Time
	// Files are the tree's regular files in git's order.
	Files []File
	// Bytes is the sum of the files' sizes.
	Bytes int64

	lock *sync.RWMutex
	inv  *invocation
}

// File is one regular file of a Tree.
type File struct {
	// Path is slash-separated, relative, with no "", ".", ".." or ".git"
	// component.
	Path string
	// Mode is 0o644 or 0o755.
	Mode fs.FileMode
	// Size is the file's size in bytes, as git's tree entry says (and
	// WriteTar checks).
	Size int64
	// Blob is git's name of the content.
	Blob string
}

// readTree resolves ref to its commit and lists its tree, refusing what
// may not be deployed before anything is read.
func (f *Fetcher) readTree(ctx context.Context, in *invocation, ref string, lim Limits) (*Tree, error) {
	out, stderr, err := in.run(ctx, 1<<10, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return nil, fmt.Errorf("%w: %s was fetched but is not a commit (%v %s)", ErrBranchNotFound, ref, err, clip(stderr, 200))
	}
	t := &Tree{SHA: strings.TrimSpace(string(out))}
	if !shaRE.MatchString(t.SHA) {
		return nil, fmt.Errorf("git rev-parse: unexpected answer %.100q", out)
	}
	out, stderr, err = in.run(ctx, 1<<10, "show", "-s", "--format=%ct", t.SHA)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w: %s", t.SHA, err, clip(stderr, 200))
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: time %.40q", t.SHA, out)
	}
	t.Time = time.Unix(secs, 0)
	if err := t.list(ctx, in, lim); err != nil {
		return nil, err
	}
	if len(t.Files) == 0 {
		return nil, fmt.Errorf("%w: the branch has no files", ErrRefused)
	}
	return t, nil
}

var shaRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// maxPath bounds one entry of ls-tree's output (and so a path's length).
const maxPath = 4096

// list streams ls-tree's entries through the checks; the first refusal
// stops ls-tree.
func (t *Tree) list(ctx context.Context, in *invocation, lim Limits) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := in.command(ctx, "ls-tree", "-r", "-l", "-z", "--full-tree", t.SHA)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errb := &tailBuffer{max: 2048}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git ls-tree: %w", err)
	}
	checkErr := readEntries(bufio.NewReaderSize(stdout, maxPath+256), lim, t)
	if checkErr != nil {
		cancel() // ls-tree may have more to say: nobody listens
	}
	err = cmd.Wait()
	switch {
	case checkErr != nil:
		return checkErr
	case err != nil:
		return fmt.Errorf("git ls-tree: %w: %s", err, clip(errb.String(), 300))
	}
	return nil
}

// readEntries reads `ls-tree -r -l -z` entries into t.Files, refusing
// links, submodules, paths that leave the tree and trees over lim.
func readEntries(r *bufio.Reader, lim Limits, t *Tree) error {
	for {
		rec, err := r.ReadSlice(0)
		if err == io.EOF && len(rec) == 0 {
			return nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("%w: a path is longer than %d bytes", ErrRefused, maxPath)
		}
		if err != nil {
			return fmt.Errorf("git ls-tree: %w", err)
		}
		f, err := parseEntry(rec[:len(rec)-1], lim)
		if err != nil {
			return err
		}
		if len(t.Files) >= lim.MaxFiles {
			return fmt.Errorf("%w: more than %d files", ErrRefused, lim.MaxFiles)
		}
		if t.Bytes += f.Size; t.Bytes > lim.MaxBytes {
			return fmt.Errorf("%w: the files add up to more than %s", ErrRefused, size(lim.MaxBytes))
		}
		t.Files = append(t.Files, f)
	}
}

// parseEntry reads one entry, "<mode> <type> <object> <size>\t<path>".
func parseEntry(rec []byte, lim Limits) (File, error) {
	meta, name, ok := bytes.Cut(rec, []byte{'\t'})
	fields := strings.Fields(string(meta))
	if !ok || len(fields) != 4 {
		return File{}, fmt.Errorf("git ls-tree: unexpected entry %.200q", rec)
	}
	p := string(name)
	if err := checkPath(p); err != nil {
		return File{}, err
	}
	f := File{Path: p, Blob: fields[2]}
	switch mode := fields[0]; {
	case mode == "120000":
		return File{}, fmt.Errorf("%w: %s is a symbolic link (nothing may link out of the tree)", ErrRefused, p)
	case mode == "160000" || fields[1] == "commit":
		return File{}, fmt.Errorf("%w: %s is a submodule (submodules are not fetched; vendor the code instead)", ErrRefused, p)
	case fields[1] != "blob" || !strings.HasPrefix(mode, "100"):
		return File{}, fmt.Errorf("%w: %s is not a regular file (mode %s)", ErrRefused, p, mode)
	case mode == "100755":
		f.Mode = 0o755
	default: // 100644, and 100664 of old repositories
		f.Mode = 0o644
	}
	if !shaRE.MatchString(f.Blob) {
		return File{}, fmt.Errorf("git ls-tree: object %.80q of %s", f.Blob, p)
	}
	n, err := strconv.ParseInt(fields[3], 10, 64)
	if err != nil || n < 0 {
		return File{}, fmt.Errorf("git ls-tree: size %.40q of %s", fields[3], p)
	}
	if n > lim.MaxFileBytes {
		return File{}, fmt.Errorf("%w: %s is larger than %s", ErrRefused, p, size(lim.MaxFileBytes))
	}
	f.Size = n
	return f, nil
}

// checkPath refuses a path that is absolute, has an empty, ".", ".." or
// ".git" component (in any case), or a control character.
func checkPath(p string) error {
	if p == "" || len(p) > maxPath || strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w: path %.200q leaves the tree", ErrRefused, p)
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: path %.200q has a control character", ErrRefused, p)
		}
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." || strings.EqualFold(part, ".git") || len(part) > 255 {
			return fmt.Errorf("%w: path %.200q leaves the tree or names git's own directory", ErrRefused, p)
		}
	}
	return nil
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$`)

// WriteTar writes the tree to w as a tar stream: directories (0755) and
// regular files (0644 or 0755), all under prefix/ (a plain directory
// name: the folder to deploy to) or at the top when prefix is empty, and
// the end-of-archive marker; w is not closed. Content is streamed from
// the cache with git cat-file, each blob checked against the size the
// tree listed. It waits for a fetch of the same repository to end;
// ErrGone means a fetch since pruned the tree's objects. Cancelling ctx
// stops it (w then holds a partial archive).
func (t *Tree) WriteTar(ctx context.Context, w io.Writer, prefix string) error {
	if prefix != "" && !prefixRE.MatchString(prefix) {
		return fmt.Errorf("%w: folder name %q", ErrInvalid, prefix)
	}
	t.lock.RLock()
	defer t.lock.RUnlock()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := t.inv.command(cctx, "cat-file", "--batch")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errb := &tailBuffer{max: 2048}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git cat-file: %w", err)
	}
	// Owned by WriteTar: it ends when every name is written or cat-file
	// is gone (killed when ctx ends, at the latest on return).
	go func() {
		bw := bufio.NewWriter(stdin)
		for _, f := range t.Files {
			if _, err := bw.WriteString(f.Blob + "\n"); err != nil {
				break
			}
		}
		_ = bw.Flush()
		stdin.Close()
	}()
	werr := t.writeTar(w, bufio.NewReaderSize(stdout, 64<<10), prefix)
	if werr != nil {
		cancel() // cat-file may have more to say: nobody listens
	}
	err = cmd.Wait()
	switch {
	case werr != nil && ctx.Err() != nil && !errors.Is(werr, ErrGone):
		return fmt.Errorf("write the tree: %w", context.Cause(ctx))
	case werr != nil:
		return werr
	case err != nil:
		return fmt.Errorf("git cat-file: %w: %s", err, clip(errb.String(), 300))
	}
	return nil
}

// writeTar reads cat-file's answers in the order the names were sent.
func (t *Tree) writeTar(w io.Writer, r *bufio.Reader, prefix string) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	dir := func(d string) error {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: t.Time}
		return tw.WriteHeader(hdr)
	}
	if prefix != "" {
		if err := dir(prefix); err != nil {
			return err
		}
	}
	for _, f := range t.Files {
		name := f.Path
		if prefix != "" {
			name = prefix + "/" + f.Path
		}
		// Parents first, each once (git lists a directory's files
		// together, so its parents come before any of them).
		var missing []string
		for d := path.Dir(name); d != "." && d != prefix && !dirs[d]; d = path.Dir(d) {
			missing = append(missing, d)
			dirs[d] = true
		}
		for i := len(missing) - 1; i >= 0; i-- {
			if err := dir(missing[i]); err != nil {
				return err
			}
		}
		if err := readHeader(r, f); err != nil {
			return err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(f.Mode), Size: f.Size, ModTime: t.Time}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, r, f.Size); err != nil {
			return fmt.Errorf("copy %s: %w", f.Path, err)
		}
		if b, err := r.ReadByte(); err != nil || b != '\n' {
			return fmt.Errorf("git cat-file: %s: no newline after the content", f.Path)
		}
	}
	return tw.Close()
}

// readHeader reads cat-file's "<object> blob <size>" line for f.
func readHeader(r *bufio.Reader, f File) error {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("git cat-file: %s: %w", f.Path, err)
	}
	fields := strings.Fields(string(line))
	if len(fields) == 2 && fields[1] == "missing" {
		return fmt.Errorf("%w: %s: fetch again", ErrGone, f.Path)
	}
	if len(fields) != 3 || fields[0] != f.Blob || fields[1] != "blob" || fields[2] != strconv.FormatInt(f.Size, 10) {
		return fmt.Errorf("git cat-file: %s: unexpected answer %.200q", f.Path, line)
	}
	return nil
}
