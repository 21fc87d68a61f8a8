package sitearchive

import (
	"bytes"
	"regexp"
)

// wpConfig is what Read takes from a wp-config.php: two names it needs to
// load the dump, nothing else (the file holds the live site's secrets).
type wpConfig struct {
	name    string // archive name, for messages
	prefix  string
	charset string
	err     error // a value that is not a plain name, if that file is used
}

// A PHP string literal, single or double quoted, with backslash escapes.
const phpString = `('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")`

var (
	prefixRE  = regexp.MustCompile(`(?s)\$table_prefix\s*=\s*` + phpString + `\s*;`)
	charsetRE = regexp.MustCompile(`(?is:define)\s*\(\s*(?:'DB_CHARSET'|"DB_CHARSET")\s*,\s*` + phpString + `\s*(?:,[^)]*)?\)`)
)

// maxNameValue bounds a table prefix or charset.
const maxNameValue = 32

// parseWPConfig finds $table_prefix and DB_CHARSET in a wp-config.php.
// It reads PHP only as far as comments and string literals: a commented
// out assignment does not count, the last assignment to $table_prefix
// wins (as when PHP runs it) and the first define of DB_CHARSET does (PHP
// refuses to define a constant twice). A value that is an expression, not
// a plain literal, is not found. Messages never quote the file.
func parseWPConfig(b []byte) wpConfig {
	code := stripComments(b)
	var c wpConfig
	if m := prefixRE.FindAllSubmatch(code, -1); m != nil {
		c.prefix = unquote(m[len(m)-1][1])
		if c.err = checkName("$table_prefix", c.prefix); c.err != nil {
			return c
		}
	}
	if m := charsetRE.FindSubmatch(code); m != nil {
		c.charset = unquote(m[1])
		if c.charset != "" {
			c.err = checkName("DB_CHARSET", c.charset)
		}
	}
	return c
}

// unquote drops a literal's quotes. Escapes stay, and fail checkName.
func unquote(lit []byte) string {
	return string(lit[1 : len(lit)-1])
}

// checkName checks a value that ends up in SQL: 1 to 32 letters, digits
// or underscores. The message names the setting, never the value.
func checkName(setting, v string) error {
	if v == "" {
		return badFormat("wp-config.php sets an empty %s", setting)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return unsafe("wp-config.php sets %s to something other than letters, digits and underscores", setting)
		}
	}
	if len(v) > maxNameValue {
		return badFormat("wp-config.php sets %s longer than %d characters", setting, maxNameValue)
	}
	return nil
}

// stripComments blanks out PHP comments (//, # and /* */) outside string
// literals.
func stripComments(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(b) && b[j] != c {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(b))
			out = append(out, b[i:j]...)
			i = j
		case c == '#' || c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
			out = append(out, ' ')
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				i = len(b)
			} else {
				i += 2 + end + 2
			}
			out = append(out, ' ')
		default:
			out = append(out, c)
			i++
		}
	}
	return out
}
