package sitearchive

import (
	"errors"
	"hash"
	"hash/crc32"
	"io"
)

// guard stands between an entry's data and the handler. It remembers the
// first error the archive gave, so Read reports the archive's fault
// rather than whatever the handler made of it, and with w set it charges
// every byte to the budget and stops at max (a dump's decompressed size).
type guard struct {
	r   io.Reader
	w   *walker
	max int64
	n   int64
	err error
}

func (g *guard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	var room int64
	if g.w != nil {
		room = min(g.max-g.n, g.w.lim.MaxBytes-g.w.used)
		if int64(len(p)) > room+1 {
			p = p[:room+1] // one byte more tells "at the limit" from "over it"
		}
	}
	n, err := g.r.Read(p)
	if g.w != nil {
		if int64(n) > room {
			n = int(room)
			if g.max-g.n <= g.w.lim.MaxBytes-g.w.used {
				g.err = tooLarge("dump is larger than %d bytes decompressed", g.max)
			} else {
				g.err = tooLarge("archive holds more than %d bytes", g.w.lim.MaxBytes)
			}
			err = g.err
		}
		g.w.used += int64(n)
	}
	g.n += int64(n)
	if err != nil && err != io.EOF && g.err == nil {
		g.err = dataErr(err)
		err = g.err
	}
	return n, err
}

// finish ends the handler's use of the data: the archive's error first,
// then the handler's, then it discards what the handler left unread, so
// a tar stream stays at the next header.
func (g *guard) finish(handlerErr error) error {
	if g.err != nil {
		return g.err
	}
	if handlerErr != nil {
		return handlerErr
	}
	if _, err := io.Copy(io.Discard, g); err != nil {
		return err
	}
	return nil
}

// dataErr classifies an error reading an entry's data.
func dataErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return formatErr(err, "archive ends inside the entry")
	}
	return formatErr(err, "read entry data")
}

// exactReader yields exactly size bytes of a ZIP entry, whose declared
// sizes can lie: more data is ErrTooLarge (found by decompressing one
// byte past size, not the rest), less is ErrFormat, and so is a CRC-32
// that does not match (when the archive gives one).
type exactReader struct {
	r    io.Reader
	size int64
	left int64
	crc  uint32
	sum  hash.Hash32
	done bool
}

func newExactReader(r io.Reader, size int64, crc uint32) *exactReader {
	return &exactReader{r: r, size: size, left: size, crc: crc, sum: crc32.NewIEEE()}
}

func (x *exactReader) Read(p []byte) (int, error) {
	if x.done {
		return 0, io.EOF
	}
	if x.left == 0 {
		var b [1]byte
		n, err := io.ReadFull(x.r, b[:])
		switch {
		case n > 0:
			return 0, tooLarge("entry holds more than the %d bytes it declares", x.size)
		case err != io.EOF:
			return 0, dataErr(err)
		case x.crc != 0 && x.sum.Sum32() != x.crc:
			return 0, badFormat("entry fails its checksum")
		}
		x.done = true
		return 0, io.EOF
	}
	if int64(len(p)) > x.left {
		p = p[:x.left]
	}
	n, err := x.r.Read(p)
	x.left -= int64(n)
	x.sum.Write(p[:n])
	switch {
	case err == io.EOF && x.left > 0:
		return n, badFormat("entry holds fewer bytes than the %d it declares", x.size)
	case err == io.EOF:
		err = nil // the next Read checks for more, and the checksum
	case err != nil:
		err = dataErr(err)
	}
	return n, err
}
