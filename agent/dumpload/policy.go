package dumpload

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrForbidden is a statement a site's dump never needs and which is
// not sent (grants, users, global settings, server files).
var ErrForbidden = errors.New("statement not allowed in a site's dump")

// Action is what happens to a checked statement.
type Action int

// Run sends the statement; Skip leaves it out.
const (
	Run Action = iota
	Skip
)

// words are a statement's keywords and names outside string literals and
// quoted identifiers, upper-cased, with executable comments' content
// counted as code (the server runs it).
func words(stmt string) []string {
	var out []string
	i := 0
	for i < len(stmt) {
		c := stmt[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for j < len(stmt) {
				if stmt[j] == '\\' && c != '`' {
					j += 2
					continue
				}
				if stmt[j] == c {
					if j+1 < len(stmt) && stmt[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			out = append(out, "'") // a literal or a quoted name
			i = j + 1
		case c == '/' && i+1 < len(stmt) && stmt[i+1] == '*':
			// An executable comment's marker and version: /*!40101 or /*M!100101
			j := i + 2
			if j < len(stmt) && stmt[j] == 'M' {
				j++
			}
			if j < len(stmt) && stmt[j] == '!' {
				j++
			}
			for j < len(stmt) && stmt[j] >= '0' && stmt[j] <= '9' {
				j++
			}
			i = j
		case isWord(c):
			j := i
			for j < len(stmt) && (isWord(stmt[j]) || stmt[j] == '.') {
				j++
			}
			out = append(out, strings.ToUpper(stmt[i:j]))
			i = j
		default:
			i++
		}
	}
	return out
}

func isWord(c byte) bool {
	return c == '_' || c == '@' || c == '$' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80
}

// forbiddenFirst are statements refused by their first word.
var forbiddenFirst = map[string]bool{
	"GRANT": true, "REVOKE": true, "SHUTDOWN": true, "KILL": true, "FLUSH": true, "RESET": true, "PURGE": true,
	"BINLOG": true, "HANDLER": true, "INSTALL": true, "UNINSTALL": true, "CACHE": true, "CHANGE": true,
	"LOAD": true, "RESTART": true,
}

// forbiddenObjects are what CREATE, ALTER, DROP and RENAME may not touch.
var forbiddenObjects = map[string]bool{"USER": true, "ROLE": true, "SERVER": true, "EVENT": true, "DATABASE": true, "SCHEMA": true}

// clientWords start mysql client commands, which are never run.
var clientWords = map[string]bool{
	"SYSTEM": true, "SOURCE": true, "CONNECT": true, "PAGER": true, "NOPAGER": true, "TEE": true, "NOTEE": true,
	"CHARSET": true, "REHASH": true, "PROMPT": true, "PRINT": true, "EXIT": true, "QUIT": true, "EGO": true, "GO": true,
	"STATUS": true, "WARNINGS": true, "NOWARNING": true, "HELP": true,
}

var definerRE = regexp.MustCompile("(?i)\\bDEFINER\\s*=\\s*(?:CURRENT_USER(?:\\s*\\(\\s*\\))?|" +
	"(?:`[^`]*`|'[^']*'|\"[^\"]*\"|[A-Za-z0-9_.%$-]+)(?:\\s*@\\s*(?:`[^`]*`|'[^']*'|\"[^\"]*\"|[A-Za-z0-9_.%$-]+))?)")

// Check decides what happens to a statement: run (the text to send,
// DEFINER clauses removed), skip (with the reason), or refused
// (ErrForbidden, ErrClientCommand).
func Check(stmt string, line int) (Action, string, error) {
	// Rows are the bulk of a dump and go to the server as they are: an
	// INSERT or REPLACE can only write tables, and the site's account
	// reaches only its own (a second statement after it is refused by
	// the server, multi-statements being off).
	if head := words(stmt[:min(len(stmt), 64)]); len(head) > 0 && (head[0] == "INSERT" || head[0] == "REPLACE") && len(stmt) > 64 {
		return Run, stmt, nil
	}
	w := words(stmt)
	if len(w) == 0 {
		return Skip, "empty", nil
	}
	first, second := w[0], ""
	if len(w) > 1 {
		second = w[1]
	}
	refuse := func(what string) (Action, string, error) {
		return Run, "", fmt.Errorf("line %d: %w: %s", line, ErrForbidden, what)
	}
	if clientWords[first] && !strings.HasPrefix(strings.TrimSpace(stmt), "/*") {
		return Run, "", fmt.Errorf("line %d: %w %q is not run: dumps are loaded by the service, not by the mysql client",
			line, ErrClientCommand, strings.ToLower(first))
	}
	switch {
	case first == "USE":
		return Skip, "USE (the dump loads into the site's own database)", nil
	case (first == "CREATE" || first == "ALTER") && (second == "DATABASE" || second == "SCHEMA"):
		return Skip, first + " DATABASE (the dump loads into the site's own database)", nil
	case forbiddenFirst[first]:
		return refuse(first)
	case first == "START" || first == "STOP":
		if second != "TRANSACTION" {
			return refuse(first + " " + second)
		}
	}
	if first == "CREATE" || first == "ALTER" || first == "DROP" || first == "RENAME" {
		obj := ""
		for _, x := range w[1:] {
			if x == "OR" || x == "REPLACE" || x == "IF" || x == "NOT" || x == "EXISTS" || x == "TEMPORARY" {
				continue
			}
			obj = x
			break
		}
		if forbiddenObjects[obj] {
			return refuse(first + " " + obj)
		}
	}
	for i, x := range w {
		nx := ""
		if i+1 < len(w) {
			nx = w[i+1]
		}
		switch {
		case x == "INTO" && (nx == "OUTFILE" || nx == "DUMPFILE"):
			return refuse("INTO " + nx)
		case (x == "DATA" || x == "INDEX") && nx == "DIRECTORY":
			return refuse(x + " DIRECTORY")
		case first == "SET" && (x == "GLOBAL" || strings.HasPrefix(x, "@@GLOBAL.") || x == "PASSWORD" || x == "ROLE" ||
			x == "DEFAULT" && nx == "ROLE" || x == "SQL_LOG_BIN"):
			return refuse("SET " + x)
		case x == "LOAD_FILE(" || x == "LOAD_FILE":
			return refuse("LOAD_FILE")
		}
	}
	if first == "CREATE" || first == "ALTER" {
		stmt = definerRE.ReplaceAllString(stmt, "")
	}
	return Run, stmt, nil
}
