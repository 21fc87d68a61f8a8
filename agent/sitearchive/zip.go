package sitearchive

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
)

// dirSlack allows for central directory signatures archive/zip reads
// twice (it searches the last 65 KiB for the directory's end) or finds in
// a comment.
const dirSlack = 4096

// errTooManyRecords stops archive/zip reading a central directory larger
// than MaxEntries allows.
var errTooManyRecords = errors.New("too many central directory records")

// readZip spools a ZIP to a file in dir (ZIP needs random access), reads
// it, and removes the file.
func (w *walker) readZip(r io.Reader, dir string) (err error) {
	f, err := os.CreateTemp(dir, "sitearchive-*.zip")
	if err != nil {
		return fmt.Errorf("spool ZIP archive: %w", err)
	}
	defer func() {
		cerr := f.Close()
		rerr := os.Remove(f.Name())
		if err == nil {
			err = errors.Join(cerr, rerr)
			if err != nil {
				err = fmt.Errorf("remove ZIP spool: %w", err)
			}
		}
	}()
	n, err := io.Copy(f, io.LimitReader(r, w.lim.MaxArchiveBytes+1))
	if err != nil {
		if isOurs(err) {
			return err
		}
		return fmt.Errorf("spool ZIP archive: %w", err)
	}
	if n > w.lim.MaxArchiveBytes {
		return tooLarge("ZIP archive is larger than %d bytes", w.lim.MaxArchiveBytes)
	}
	dc := &dirCounter{r: f, max: w.lim.MaxEntries + dirSlack, on: true}
	zr, err := zip.NewReader(dc, n)
	dc.on = false
	switch {
	case errors.Is(err, errTooManyRecords):
		return tooLarge("archive holds more than %d entries", w.lim.MaxEntries)
	case err != nil && !errors.Is(err, zip.ErrInsecurePath):
		// ErrInsecurePath comes with a usable reader (GODEBUG
		// zipinsecurepath=0): our own checks judge the names.
		return formatErr(err, "read ZIP directory")
	}
	if len(zr.File) > w.lim.MaxEntries {
		return tooLarge("archive holds more than %d entries", w.lim.MaxEntries)
	}
	for _, zf := range zr.File {
		e, err := zipEntry(zf)
		if err != nil {
			return entryErr(zf.Name, err)
		}
		if e.kind == kindSymlink {
			if e.target, err = w.zipLinkTarget(zf); err != nil {
				return entryErr(zf.Name, err)
			}
		}
		if err := w.entry(e); err != nil {
			return err
		}
	}
	return nil
}

// zipEntry maps a ZIP file header to an entry.
func zipEntry(zf *zip.File) (*entry, error) {
	m := zf.Mode()
	e := &entry{name: zf.Name, exec: m&0o111 != 0}
	switch {
	case m.IsDir():
		e.kind = kindDir
	case m&fs.ModeSymlink != 0:
		e.kind = kindSymlink
	case m&(fs.ModeCharDevice) != 0:
		e.kind, e.other = kindOther, "a character device"
	case m&fs.ModeDevice != 0:
		e.kind, e.other = kindOther, "a block device"
	case m&fs.ModeNamedPipe != 0:
		e.kind, e.other = kindOther, "a FIFO"
	case m&fs.ModeSocket != 0:
		e.kind, e.other = kindOther, "a socket"
	case !m.IsRegular():
		e.kind, e.other = kindOther, fmt.Sprintf("of unknown type %v", m.Type())
	default:
		if zf.UncompressedSize64 > math.MaxInt64 {
			return nil, tooLarge("file declares %d bytes", zf.UncompressedSize64)
		}
		e.kind, e.size = kindFile, int64(zf.UncompressedSize64)
		e.open = func() (io.Reader, error) { return openZip(zf) }
	}
	return e, nil
}

// zipLinkTarget reads a ZIP symlink's target, which is its data.
func (w *walker) zipLinkTarget(zf *zip.File) (string, error) {
	if zf.UncompressedSize64 > maxNameLen {
		return "", unsafe("symlink target is longer than %d bytes", maxNameLen)
	}
	size := int64(zf.UncompressedSize64)
	if err := w.take(size); err != nil {
		return "", err
	}
	r, err := openZip(zf)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// openZip decompresses a ZIP entry's data itself, from the raw bytes, so
// that its size is held to what it declares (see exactReader).
func openZip(zf *zip.File) (io.Reader, error) {
	if zf.Flags&0x1 != 0 {
		return nil, badFormat("entry is encrypted")
	}
	raw, err := zf.OpenRaw()
	if err != nil {
		return nil, formatErr(err, "open entry data")
	}
	var r io.Reader
	switch zf.Method {
	case zip.Store:
		r = raw
	case zip.Deflate:
		r = flate.NewReader(raw)
	default:
		return nil, badFormat("entry uses compression method %d; only stored and deflated entries are supported", zf.Method)
	}
	return newExactReader(r, int64(zf.UncompressedSize64), zf.CRC32), nil
}

// dirCounter counts central directory signatures in what archive/zip
// reads while it loads the directory, and stops it past max, before it
// holds millions of records in memory: it reads records until one is
// malformed, whatever count the archive declares.
type dirCounter struct {
	r     io.ReaderAt
	max   int
	count int
	on    bool
}

var centralSig = []byte("PK\x01\x02")

func (d *dirCounter) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.r.ReadAt(p, off)
	if d.on {
		d.count += bytes.Count(p[:n], centralSig)
		if d.count > d.max {
			return 0, errTooManyRecords
		}
	}
	return n, err
}
