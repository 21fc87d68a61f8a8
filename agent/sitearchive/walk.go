package sitearchive

import (
	"compress/gzip"
	"hash/maphash"
	"io"
	"io/fs"
	"path"
	"strings"
)

// maxConfigBytes bounds a wp-config.php that Read parses; a larger one is
// not a real one and is ignored.
const maxConfigBytes = 1 << 20

type entryKind uint8

const (
	kindFile entryKind = iota
	kindDir
	kindSymlink
	kindHardlink
	kindOther // devices, FIFOs, sockets, unknown: always refused
)

// entry is one archive entry, whatever the format.
type entry struct {
	name   string // as the archive has it
	kind   entryKind
	exec   bool   // a file with any execute bit
	size   int64  // a file's declared size
	target string // a link's target, as the archive has it
	other  string // what a kindOther is, for the message
	// open returns a reader of the file's data, exactly size bytes or an
	// error; the walker charges the budget before it calls open.
	open   func() (io.Reader, error)
	opened bool
}

// node is what the archive last made at a path under wp-content.
type node uint8

const (
	nodeDir node = iota + 1 // a directory, or a parent of an entry
	nodeFile
	nodeLink // a symlink: sticks, even if a later entry replaces it
)

// walker applies the layout and safety rules to entries, in archive
// order, and hands what it accepts to the Handler.
type walker struct {
	lim     Limits
	h       Handler
	zip     bool
	sum     Summary
	entries int
	used    int64 // of lim.MaxBytes
	rootSet bool
	// nodes holds, by a keyed hash of rel, what is at each path under
	// wp-content: a hash, not the string, so a million entries cost
	// tens of megabytes; keyed, so a tenant cannot aim for collisions.
	seed    maphash.Seed
	nodes   map[uint64]node
	configs map[string]wpConfig // by directory
}

func newWalker(lim Limits, h Handler, zip bool) *walker {
	return &walker{
		lim:     lim,
		h:       h,
		zip:     zip,
		seed:    maphash.MakeSeed(),
		nodes:   make(map[uint64]node),
		configs: make(map[string]wpConfig),
	}
}

// count counts an entry against MaxEntries.
func (w *walker) count(name string) error {
	w.entries++
	if w.entries > w.lim.MaxEntries {
		return entryErr(name, tooLarge("archive holds more than %d entries", w.lim.MaxEntries))
	}
	return nil
}

// take charges n bytes of entry data to the budget.
func (w *walker) take(n int64) error {
	if n > w.lim.MaxBytes-w.used {
		return tooLarge("archive holds more than %d bytes", w.lim.MaxBytes)
	}
	w.used += n
	return nil
}

// entry checks one entry and hands it on.
func (w *walker) entry(e *entry) error {
	if err := w.count(e.name); err != nil {
		return err
	}
	if e.kind == kindOther {
		return entryErr(e.name, unsafe("entry is %s, not a file, directory or link", e.other))
	}
	comps, err := splitName(e.name, w.zip)
	if err != nil {
		return entryErr(e.name, err)
	}
	if len(comps) == 0 && e.kind != kindDir {
		return entryErr(e.name, unsafe("entry has an empty name"))
	}
	root, rel, ok := splitContent(comps)
	if !ok {
		err = w.outside(e, comps)
	} else {
		err = w.content(e, root, rel)
	}
	if err != nil {
		return entryErr(e.name, err)
	}
	return nil
}

// content handles an entry under wp-content.
func (w *walker) content(e *entry, root string, rel []string) error {
	if !w.rootSet {
		w.rootSet, w.sum.Root = true, root
	} else if root != w.sum.Root {
		return badFormat("archive holds more than one WordPress root (%s and %s)", showRoot(w.sum.Root), showRoot(root))
	}
	if len(rel) == 0 {
		if e.kind != kindDir {
			return unsafe("wp-content is not a directory")
		}
		return nil
	}
	key, err := w.walkParents(rel)
	if err != nil {
		return err
	}
	name := strings.Join(rel, "/")
	switch e.kind {
	case kindDir:
		if err := w.h.Dir(name, fs.ModeDir|0o755); err != nil {
			return err
		}
		w.sum.Dirs++
		w.mark(key, nodeDir)
	case kindFile:
		if err := w.file(e, name); err != nil {
			return err
		}
		w.mark(key, nodeFile)
	case kindSymlink:
		if w.nodes[key] == nodeDir {
			return unsafe("symlink would replace a directory")
		}
		target, err := linkTarget(rel, e.target, w.zip)
		if err != nil {
			return err
		}
		if err := w.h.Symlink(name, target); err != nil {
			return err
		}
		w.sum.Links++
		w.nodes[key] = nodeLink
	case kindHardlink:
		target, err := w.hardlinkTarget(e.target)
		if err != nil {
			return err
		}
		if target == name {
			return unsafe("hardlink points at itself")
		}
		if err := w.h.Hardlink(name, target); err != nil {
			return err
		}
		w.sum.Links++
		w.mark(key, nodeFile)
	}
	return nil
}

// walkParents refuses a path through a symlink, records its parents as
// directories and returns the key of the path itself. Hashing is
// incremental, so a deep name costs its length once, not per level.
func (w *walker) walkParents(rel []string) (uint64, error) {
	var h maphash.Hash
	h.SetSeed(w.seed)
	for i, c := range rel {
		if i > 0 {
			h.WriteByte('/')
		}
		h.WriteString(c)
		if i == len(rel)-1 {
			break
		}
		k := h.Sum64()
		switch w.nodes[k] {
		case nodeLink:
			return 0, unsafe("path goes through the symlink %q", strings.Join(rel[:i+1], "/"))
		case nodeDir:
		default:
			w.nodes[k] = nodeDir
		}
	}
	return h.Sum64(), nil
}

// mark records what an entry made, except over a symlink, which sticks:
// an extractor may keep a symlink where the archive later puts a
// directory, so nothing may ever go through it.
func (w *walker) mark(key uint64, n node) {
	if w.nodes[key] != nodeLink {
		w.nodes[key] = n
	}
}

// hardlinkTarget checks that a hard link's target is a regular file an
// earlier entry put under this root's wp-content, and returns its rel.
func (w *walker) hardlinkTarget(target string) (string, error) {
	comps, err := splitName(target, w.zip)
	if err != nil {
		return "", unsafe("hardlink target: %v", err)
	}
	root, rel, ok := splitContent(comps)
	if !ok || root != w.sum.Root || len(rel) == 0 {
		return "", unsafe("hardlink points outside the site's wp-content")
	}
	name := strings.Join(rel, "/")
	if w.nodes[maphash.String(w.seed, name)] != nodeFile {
		return "", unsafe("hardlink target %q is not an earlier file", name)
	}
	return name, nil
}

// file hands a regular file under wp-content to the handler.
func (w *walker) file(e *entry, name string) error {
	r, err := w.openData(e)
	if err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if e.exec {
		mode = 0o755
	}
	g := &guard{r: r}
	herr := w.h.File(name, mode, e.size, g)
	if err := g.finish(herr); err != nil {
		return err
	}
	w.sum.Files++
	w.sum.Bytes += e.size
	return nil
}

// openData checks a file's declared size against the limits, charges it
// and opens the data.
func (w *walker) openData(e *entry) (io.Reader, error) {
	if e.size > w.lim.MaxFileBytes {
		return nil, tooLarge("file is larger than %d bytes", w.lim.MaxFileBytes)
	}
	if err := w.take(e.size); err != nil {
		return nil, err
	}
	e.opened = true
	r, err := e.open()
	if err != nil {
		return nil, formatErr(err, "open entry data")
	}
	return r, nil
}

// outside handles an entry that is not under wp-content: a dump,
// wp-config.php, or something skipped.
func (w *walker) outside(e *entry, comps []string) error {
	if e.kind != kindFile || len(comps) == 0 {
		w.sum.Skipped++
		return nil
	}
	base := comps[len(comps)-1]
	name := strings.Join(comps, "/")
	switch {
	case isDump(base):
		return w.dump(e, name, isGzipDump(base))
	case base == "wp-config.php":
		return w.config(e, path.Dir(name))
	}
	w.sum.Skipped++
	return nil
}

// dump hands an SQL dump to the handler, decompressing a .sql.gz under
// the same limits.
func (w *walker) dump(e *entry, name string, gz bool) error {
	r, err := w.openData(e)
	if err != nil {
		return err
	}
	raw := &guard{r: r}
	var sql *guard
	var herr error
	if gz {
		zr, err := gzip.NewReader(raw)
		if err != nil {
			if raw.err != nil {
				return raw.err
			}
			return formatErr(err, "dump is not gzip-compressed")
		}
		sql = &guard{r: zr, w: w, max: w.lim.MaxFileBytes}
		herr = w.h.SQL(name, sql)
		if sql.err != nil {
			// The archive's fault, over whatever the handler made of it.
			herr = sql.err
		}
	} else {
		herr = w.h.SQL(name, raw)
	}
	if err := raw.finish(herr); err != nil {
		return err
	}
	if sql != nil {
		w.sum.Bytes += sql.n
	} else {
		w.sum.Bytes += e.size
	}
	w.sum.Dumps = append(w.sum.Dumps, name)
	return nil
}

// config reads a wp-config.php outside wp-content; which one counts is
// decided at the end, when the root is known. Its contents never reach
// the handler or a message.
func (w *walker) config(e *entry, dir string) error {
	if e.size > maxConfigBytes {
		return nil
	}
	r, err := w.openData(e)
	if err != nil {
		return err
	}
	g := &guard{r: r}
	b, err := io.ReadAll(g)
	if err := g.finish(err); err != nil {
		return err
	}
	if dir == "." {
		dir = ""
	}
	c := parseWPConfig(b)
	c.name = e.name
	w.configs[dir] = c
	return nil
}

// finish checks the archive as a whole and takes the root's wp-config.php.
func (w *walker) finish() error {
	if !w.rootSet && len(w.sum.Dumps) == 0 {
		return badFormat("archive holds neither a wp-content directory nor a .sql or .sql.gz dump: " +
			"upload a WordPress site's root directory, or its wp-content directory with a database dump")
	}
	c, ok := w.configs[w.sum.Root]
	if !ok {
		return nil
	}
	if c.err != nil {
		return entryErr(c.name, c.err)
	}
	w.sum.WholeRoot = true
	w.sum.TablePrefix, w.sum.DBCharset = c.prefix, c.charset
	return nil
}
