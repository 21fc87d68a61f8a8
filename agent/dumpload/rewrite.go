package dumpload

import (
	"strings"
)

// unescape reads a MySQL string literal's body (between its quotes) as
// the server would, in the default sql_mode: backslash escapes, and the
// quote doubled.
func unescape(body string, q byte) string {
	if strings.IndexByte(body, '\\') < 0 && strings.IndexByte(body, q) < 0 {
		return body
	}
	var b strings.Builder
	b.Grow(len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\' && i+1 < len(body):
			i++
			switch e := body[i]; e {
			case '0':
				b.WriteByte(0)
			case 'b':
				b.WriteByte('\b')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'Z':
				b.WriteByte(0x1a)
			case '%', '_': // kept with their backslash outside LIKE
				b.WriteByte('\\')
				b.WriteByte(e)
			default:
				b.WriteByte(e)
			}
		case c == q && i+1 < len(body) && body[i+1] == q:
			b.WriteByte(q)
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// escape writes a value as a single-quoted literal, as mysqldump does.
func escape(v string) string {
	var b strings.Builder
	b.Grow(len(v) + 16)
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`\'`)
		case 0x1a:
			b.WriteString(`\Z`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// rewriteLiterals applies f to every string literal of an INSERT or
// REPLACE statement that may hold needle (lower case), and returns the
// statement and how many literals changed. Quoted identifiers and
// anything outside literals stay as they are.
func rewriteLiterals(stmt, needle string, f func(string) string) (string, int) {
	low := strings.ToLower(stmt) // ASCII-only case changes keep offsets
	if len(low) != len(stmt) || !strings.Contains(low, needle) {
		if len(low) == len(stmt) {
			return stmt, 0
		}
		low = asciiLower(stmt)
		if !strings.Contains(low, needle) {
			return stmt, 0
		}
	}
	var out strings.Builder
	changed, last := 0, 0
	for i := 0; i < len(stmt); i++ {
		c := stmt[i]
		if c == '`' {
			for i++; i < len(stmt) && stmt[i] != '`'; i++ {
			}
			continue
		}
		if c != '\'' && c != '"' {
			continue
		}
		start := i
		for i++; i < len(stmt); i++ {
			if stmt[i] == '\\' {
				i++
				continue
			}
			if stmt[i] == c {
				if i+1 < len(stmt) && stmt[i+1] == c {
					i++
					continue
				}
				break
			}
		}
		if i >= len(stmt) {
			break // unterminated: the server will say so
		}
		body := stmt[start+1 : i]
		if !strings.Contains(low[start+1:i], needle) {
			continue
		}
		v := unescape(body, c)
		nv := f(v)
		if nv == v {
			continue
		}
		out.WriteString(stmt[last:start])
		out.WriteString(escape(nv))
		last = i + 1
		changed++
	}
	if changed == 0 {
		return stmt, 0
	}
	out.WriteString(stmt[last:])
	return out.String(), changed
}

// asciiLower lowers ASCII letters only, so offsets stay those of s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}
