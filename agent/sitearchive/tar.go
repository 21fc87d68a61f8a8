package sitearchive

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Header overhead a tar stream may carry beyond its entries' data: PAX
// records, GNU long names, padding. archive/tar reads any number of PAX
// headers before it returns the next entry, so without this bound a small
// compressed stream of headers alone would keep it decompressing for ever.
const (
	headerSlack    = 16 << 20
	headerPerEntry = 16 << 10
)

// readTar reads a tar stream, entry by entry, in one pass. In a
// compressed stream it reads on past the tar's end, to the end of the
// stream, so the compression's checksum covers what was handed on.
func (w *walker) readTar(r io.Reader, compressed bool) error {
	sc := &streamCounter{r: r, w: w}
	tr := tar.NewReader(sc)
	last := ""
	for {
		hdr, err := tr.Next()
		if err == io.EOF { // archive/tar's own end, not wrapped
			if compressed {
				return drainStream(sc)
			}
			return nil
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			// ErrInsecurePath comes with a usable header (GODEBUG
			// tarinsecurepath=0): our own checks judge the name.
			if sc.err != nil {
				err = sc.err
			}
			if last == "" {
				return formatErr(err, "read tar header")
			}
			return formatErr(err, "read tar header after entry %q", last)
		}
		last = hdr.Name
		e := tarEntry(hdr)
		if e == nil {
			// A PAX global header: metadata archive/tar returns as an
			// entry. It still counts.
			if err := w.count(hdr.Name); err != nil {
				return err
			}
			continue
		}
		e.open = func() (io.Reader, error) { return tr, nil }
		if err := w.entry(e); err != nil {
			return err
		}
		if !e.opened && e.kind == kindFile {
			// The next Next decompresses this entry's data to skip it.
			if err := w.take(e.size); err != nil {
				return entryErr(e.name, err)
			}
		}
	}
}

// drainStream reads a compressed stream to its end, within the header
// allowance. Trailing bytes that are not another gzip member or zstd frame
// are ignored, as gzip -d does; a bad checksum or a cut-off stream is not.
func drainStream(sc *streamCounter) error {
	_, err := io.Copy(io.Discard, sc)
	switch {
	case err == nil, errors.Is(err, gzip.ErrHeader), errors.Is(err, zstd.ErrMagicMismatch):
		return nil
	case sc.err != nil:
		return sc.err
	}
	return formatErr(err, "read the compressed stream after the tar's end")
}

// tarEntry maps a tar header to an entry, nil for a global header.
func tarEntry(hdr *tar.Header) *entry {
	e := &entry{name: hdr.Name, exec: hdr.Mode&0o111 != 0}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		// archive/tar turns the old TypeRegA into TypeReg or TypeDir
		// and reads sparse files as their logical bytes.
		e.kind, e.size = kindFile, hdr.Size
	case tar.TypeDir:
		e.kind = kindDir
	case tar.TypeSymlink:
		e.kind, e.target = kindSymlink, hdr.Linkname
	case tar.TypeLink:
		e.kind, e.target = kindHardlink, hdr.Linkname
	case tar.TypeChar:
		e.kind, e.other = kindOther, "a character device"
	case tar.TypeBlock:
		e.kind, e.other = kindOther, "a block device"
	case tar.TypeFifo:
		e.kind, e.other = kindOther, "a FIFO"
	case tar.TypeXGlobalHeader:
		return nil
	default:
		e.kind, e.other = kindOther, fmt.Sprintf("of unknown type %q", hdr.Typeflag)
	}
	return e
}

// streamCounter bounds the bytes of a tar stream by what its entries
// account for: the data charged to the budget plus headerSlack and
// headerPerEntry for each entry so far.
type streamCounter struct {
	r   io.Reader
	w   *walker
	n   int64
	err error
}

func (s *streamCounter) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	allow := headerSlack + int64(s.w.entries)*headerPerEntry + s.w.used - s.n
	if allow <= 0 {
		s.err = tooLarge("tar headers take more than %d bytes per entry", headerPerEntry)
		return 0, s.err
	}
	if int64(len(p)) > allow {
		p = p[:allow]
	}
	n, err := s.r.Read(p)
	s.n += int64(n)
	return n, err
}
