// Package dumpload loads a SQL dump (mysqldump's text format) that a
// tenant uploaded into the tenant's own database, without the mysql
// command-line client: the dump is split into statements here and each
// is sent on its own over a connection logged in as the site's database
// user. Client commands (shell escapes, source, connect) are never run,
// statements that select or make a database are skipped, statements a
// site's dump never needs (grants, users, global settings, server files)
// are refused, and DEFINER clauses are removed. What is left is confined
// by the site user's privileges.
package dumpload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrTooLarge is a statement longer than the scanner's limit.
var ErrTooLarge = errors.New("statement too large")

// ErrSyntax is a dump that ends inside a string, identifier or comment.
var ErrSyntax = errors.New("unterminated SQL")

// Statement is one statement of a dump, without its delimiter.
type Statement struct {
	Text string
	// Line is the 1-based line the statement starts on.
	Line int
}

// Scanner splits a dump into statements as the mysql client does:
// quotes, identifiers and comments are honoured, and DELIMITER changes
// the delimiter. It holds at most one statement in memory.
type Scanner struct {
	r     io.Reader
	buf   []byte
	pos   int
	end   int
	eof   bool
	err   error
	line  int
	delim []byte
	max   int
	stmt  []byte
	read  int64
}

// NewScanner reads statements from r; a statement longer than max bytes
// is ErrTooLarge.
func NewScanner(r io.Reader, max int) *Scanner {
	return &Scanner{r: r, buf: make([]byte, 1<<20), line: 1, delim: []byte(";"), max: max}
}

// BytesRead is how much of the input has been consumed.
func (s *Scanner) BytesRead() int64 { return s.read }

// fill makes at least n bytes available from pos, if the input has them.
func (s *Scanner) fill(n int) bool {
	for s.end-s.pos < n && !s.eof {
		if s.pos > 0 {
			copy(s.buf, s.buf[s.pos:s.end])
			s.end -= s.pos
			s.pos = 0
		}
		if s.end == len(s.buf) {
			s.buf = append(s.buf, make([]byte, len(s.buf))...)
		}
		k, err := s.r.Read(s.buf[s.end:])
		s.end += k
		s.read += int64(k)
		if err == io.EOF {
			s.eof = true
		} else if err != nil {
			s.eof, s.err = true, err
		}
	}
	return s.end-s.pos >= n
}

func (s *Scanner) peek(i int) (byte, bool) {
	if !s.fill(i + 1) {
		return 0, false
	}
	return s.buf[s.pos+i], true
}

// emit appends b to the statement, within the limit.
func (s *Scanner) emit(b []byte, startLine int) error {
	if len(s.stmt)+len(b) > s.max {
		return fmt.Errorf("line %d: %w (over %d bytes)", startLine, ErrTooLarge, s.max)
	}
	s.stmt = append(s.stmt, b...)
	return nil
}

// Next returns the next statement, or io.EOF after the last.
func (s *Scanner) Next() (Statement, error) {
	s.stmt = s.stmt[:0]
	start := 0      // the line of the statement's first non-blank byte
	inExec := false // inside /*! … */, whose content the server runs
	for {
		if !s.fill(1) {
			if s.err != nil {
				return Statement{}, fmt.Errorf("read dump: %w", s.err)
			}
			if inExec {
				return Statement{}, fmt.Errorf("line %d: %w: an executable comment is not closed", start, ErrSyntax)
			}
			if start == 0 {
				return Statement{}, io.EOF
			}
			return Statement{Text: string(s.stmt), Line: start}, nil
		}
		c := s.buf[s.pos]
		if start == 0 {
			switch c {
			case ' ', '\t', '\r':
				s.pos++
				continue
			case '\n':
				s.line++
				s.pos++
				continue
			}
			if s.sandboxMode() {
				continue
			}
			if ok, err := s.delimiterCommand(); err != nil {
				return Statement{}, err
			} else if ok {
				continue
			}
			if !s.isDelim() && c != '#' && !(c == '-' && s.dashComment()) && !(c == '/' && s.next(1) == '*' && s.next(2) != '!' &&
				!(s.next(2) == 'M' && s.next(3) == '!')) {
				start = s.line
			}
		}
		switch {
		case !inExec && s.isDelim():
			s.pos += len(s.delim)
			if start == 0 {
				s.stmt = s.stmt[:0] // an empty statement
				continue
			}
			return Statement{Text: string(s.stmt), Line: start}, nil
		case c == '\'' || c == '"' || c == '`':
			if err := s.quoted(c, start); err != nil {
				return Statement{}, err
			}
		case c == '-' && s.dashComment():
			s.skipLine()
		case c == '#':
			s.skipLine()
		case c == '/' && s.next(1) == '*':
			if s.next(2) == '!' || (s.next(2) == 'M' && s.next(3) == '!') {
				// Kept as it is: the server runs its content.
				inExec = true
				if err := s.emit([]byte("/*"), start); err != nil {
					return Statement{}, err
				}
				s.pos += 2
				continue
			}
			if err := s.blockComment(start); err != nil {
				return Statement{}, err
			}
		case c == '*' && inExec && s.next(1) == '/':
			inExec = false
			if err := s.emit([]byte("*/"), start); err != nil {
				return Statement{}, err
			}
			s.pos += 2
		case c == '\\':
			cmd := "\\"
			if n := s.next(1); n != 0 {
				cmd += string(n)
			}
			return Statement{}, clientCommand(cmd, s.line)
		default:
			// A run of plain bytes up to the next one that matters.
			run := s.buf[s.pos:s.end]
			stop := bytes.IndexAny(run, "'\"`-#/*\\\n"+string(s.delim[:1]))
			if stop == 0 {
				if c == '\n' {
					s.line++
				}
				stop = 1
			} else if stop < 0 {
				stop = len(run)
			}
			if err := s.emit(run[:stop], start); err != nil {
				return Statement{}, err
			}
			s.pos += stop
		}
	}
}

// sandboxModeLine is the first line of a dump by MariaDB's mysqldump
// since 10.5.25 (and 10.11.8, 11.x): a comment no server runs, whose
// "\-" tells the mysql client to refuse client commands from there on.
// This loader never runs one, so the line is dropped.
var sandboxModeLine = []byte(`/*M!999999\- enable the sandbox mode */`)

// sandboxMode skips the sandbox-mode comment when pos starts it.
func (s *Scanner) sandboxMode() bool {
	if !s.fill(len(sandboxModeLine)) || !bytes.Equal(s.buf[s.pos:s.pos+len(sandboxModeLine)], sandboxModeLine) {
		return false
	}
	s.pos += len(sandboxModeLine)
	return true
}

// next is the byte i ahead of pos, or 0.
func (s *Scanner) next(i int) byte {
	b, _ := s.peek(i)
	return b
}

func (s *Scanner) isDelim() bool {
	if !s.fill(len(s.delim)) {
		return false
	}
	return bytes.Equal(s.buf[s.pos:s.pos+len(s.delim)], s.delim)
}

// dashComment reports whether pos starts "-- " (a comment needs the
// blank after the dashes: 1--1 is arithmetic).
func (s *Scanner) dashComment() bool {
	if s.next(1) != '-' {
		return false
	}
	b, ok := s.peek(2)
	return !ok || b == ' ' || b == '\t' || b == '\n' || b == '\r'
}

// skipLine drops the rest of the line (its newline stays for the count).
func (s *Scanner) skipLine() {
	for s.fill(1) {
		i := bytes.IndexByte(s.buf[s.pos:s.end], '\n')
		if i >= 0 {
			s.pos += i
			return
		}
		s.pos = s.end
	}
}

func (s *Scanner) blockComment(start int) error {
	s.pos += 2
	for {
		if !s.fill(2) {
			if s.fill(1) {
				s.pos++
			}
			return fmt.Errorf("line %d: %w: a comment is not closed", start, ErrSyntax)
		}
		if s.buf[s.pos] == '*' && s.buf[s.pos+1] == '/' {
			s.pos += 2
			if err := s.emit([]byte(" "), start); err != nil {
				return err
			}
			return nil
		}
		if s.buf[s.pos] == '\n' {
			s.line++
		}
		s.pos++
	}
}

// quoted copies a string literal or quoted identifier whole.
func (s *Scanner) quoted(q byte, start int) error {
	if err := s.emit([]byte{q}, start); err != nil {
		return err
	}
	s.pos++
	stops := string(q) + "\\\n"
	if q == '`' {
		stops = "`\n"
	}
	for {
		if !s.fill(1) {
			return fmt.Errorf("line %d: %w: a quoted string is not closed", start, ErrSyntax)
		}
		run := s.buf[s.pos:s.end]
		i := bytes.IndexAny(run, stops)
		if i < 0 {
			if err := s.emit(run, start); err != nil {
				return err
			}
			s.pos = s.end
			continue
		}
		if err := s.emit(run[:i], start); err != nil {
			return err
		}
		s.pos += i
		c := s.buf[s.pos]
		switch {
		case c == '\n':
			s.line++
			if err := s.emit([]byte{c}, start); err != nil {
				return err
			}
			s.pos++
		case c == '\\':
			if !s.fill(2) {
				return fmt.Errorf("line %d: %w: a quoted string is not closed", start, ErrSyntax)
			}
			if s.buf[s.pos+1] == '\n' {
				s.line++
			}
			if err := s.emit(s.buf[s.pos:s.pos+2], start); err != nil {
				return err
			}
			s.pos += 2
		default: // the quote: doubled, it is part of the string
			if s.next(1) == q {
				if err := s.emit([]byte{q, q}, start); err != nil {
					return err
				}
				s.pos += 2
				continue
			}
			s.pos++
			return s.emit([]byte{q}, start)
		}
	}
}

// delimiterCommand handles "DELIMITER x" at the start of a statement.
func (s *Scanner) delimiterCommand() (bool, error) {
	const kw = "delimiter"
	if !s.fill(len(kw) + 1) {
		return false, nil
	}
	head := s.buf[s.pos : s.pos+len(kw)+1]
	if !strings.EqualFold(string(head[:len(kw)]), kw) || (head[len(kw)] != ' ' && head[len(kw)] != '\t') {
		return false, nil
	}
	line := s.line
	s.pos += len(kw)
	var rest []byte
	for s.fill(1) && s.buf[s.pos] != '\n' {
		rest = append(rest, s.buf[s.pos])
		s.pos++
		if len(rest) > 64 {
			return false, fmt.Errorf("line %d: DELIMITER line too long", line)
		}
	}
	d := strings.Fields(string(rest))
	if len(d) == 0 || strings.ContainsAny(d[0], "'\"`\\") {
		return false, fmt.Errorf("line %d: DELIMITER needs a delimiter", line)
	}
	s.delim = []byte(d[0])
	return true, nil
}

// ErrClientCommand is a mysql client command in a dump: it is never run.
var ErrClientCommand = errors.New("client command")

func clientCommand(cmd string, line int) error {
	what := ""
	switch cmd {
	case `\!`:
		what = " (shell escape)"
	case `\.`:
		what = " (source)"
	}
	return fmt.Errorf("line %d: %w %q%s is not run: dumps are loaded by the service, not by the mysql client", line, ErrClientCommand, cmd, what)
}
