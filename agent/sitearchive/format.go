package sitearchive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

// blockSize is a tar block: the unit of headers and padding.
const blockSize = 512

// maxZstdWindow bounds the memory a zstd frame may ask for: 128 MiB is
// what `zstd --long` and the highest levels use.
const maxZstdWindow = 128 << 20

type format int

const (
	formatTar format = iota
	formatGzip
	formatZstd
	formatZip
)

func (f format) String() string {
	switch f {
	case formatGzip:
		return "tar.gz"
	case formatZstd:
		return "tar.zst"
	case formatZip:
		return "zip"
	}
	return "tar"
}

// refused are formats a tenant may well upload, with what to say.
var refused = []struct {
	magic []byte
	name  string
}{
	{[]byte("BZh"), "bzip2"},
	{[]byte{0xfd, '7', 'z', 'X', 'Z', 0}, "xz"},
	{[]byte{'7', 'z', 0xbc, 0xaf, 0x27, 0x1c}, "7z"},
	{[]byte("Rar!\x1a\x07"), "RAR"},
}

// detect tells the format from an archive's first bytes (up to a block).
func detect(head []byte) (format, error) {
	switch {
	case len(head) == 0:
		return 0, badFormat("archive is empty")
	case isUstar(head):
		// First: a tar's first bytes are a name, which could be anything.
		return formatTar, nil
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return formatGzip, nil
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return formatZstd, nil
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		return formatZip, nil
	}
	for _, r := range refused {
		if bytes.HasPrefix(head, r.magic) {
			return 0, badFormat("archive is %s-compressed, which is not supported: upload a tar, tar.gz, tar.zst or ZIP archive", r.name)
		}
	}
	if looksLikeTar(head) {
		return formatTar, nil
	}
	return 0, badFormat("not a tar, tar.gz, tar.zst or ZIP archive")
}

// isUstar reports a POSIX or GNU tar header.
func isUstar(b []byte) bool {
	return len(b) >= blockSize && bytes.HasPrefix(b[257:], []byte("ustar")) && checksumOK(b)
}

// looksLikeTar reports a block that a tar may start with: a header with a
// good checksum (old V7 tars have no magic) or the zero block that ends
// an empty archive.
func looksLikeTar(b []byte) bool {
	if len(b) < blockSize {
		return false
	}
	b = b[:blockSize]
	return checksumOK(b) || bytes.Equal(b, make([]byte, blockSize))
}

// checksumOK checks a tar header's checksum: the sum of its bytes with the
// checksum field read as spaces, unsigned or (some old tars) signed.
func checksumOK(b []byte) bool {
	field := bytes.Trim(b[148:156], " \x00")
	want, err := strconv.ParseInt(string(field), 8, 64)
	if err != nil {
		return false
	}
	var unsigned, signed int64
	for i, c := range b[:blockSize] {
		if i >= 148 && i < 156 {
			c = ' '
		}
		unsigned += int64(c)
		signed += int64(int8(c))
	}
	return want == unsigned || want == signed
}

func (w *walker) readGzip(r io.Reader) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return formatErr(err, "read gzip stream")
	}
	defer zr.Close()
	return w.readInnerTar(zr, "gzip")
}

func (w *walker) readZstd(r io.Reader) error {
	zr, err := zstd.NewReader(r,
		zstd.WithDecoderConcurrency(1), // no read-ahead goroutines: a bomb stops where Read stops
		zstd.WithDecoderMaxWindow(maxZstdWindow),
		zstd.WithDecoderMaxMemory(maxZstdWindow),
	)
	if err != nil {
		return formatErr(err, "read zstd stream")
	}
	defer zr.Close()
	return w.readInnerTar(zr, "zstd")
}

// readInnerTar reads the tar inside a compressed stream, after checking
// that it is one (a tenant may compress a lone dump).
func (w *walker) readInnerTar(r io.Reader, what string) error {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(blockSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return formatErr(err, "read %s stream", what)
	}
	if !looksLikeTar(head) {
		return badFormat("the %s stream does not hold a tar archive", what)
	}
	return w.readTar(br, true)
}
