package main

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"testing"
)

// TestHelpNamesFlagArgumentsByType: every command's -h names each flag's
// argument by its type, never by words of its usage (the flag package
// takes a backquoted word for the argument's name).
func TestHelpNamesFlagArgumentsByType(t *testing.T) {
	commands := map[string]func([]string) error{
		"dev": runDev, "server": runServer, "agent": runAgent, "edge": runEdge,
		"admin cluster":           func(a []string) error { return runAdmin(append([]string{"cluster"}, a...), io.Discard) },
		"admin join-token create": func(a []string) error { return runAdmin(append([]string{"join-token", "create"}, a...), io.Discard) },
		"admin sealing-key ids":   func(a []string) error { return runAdmin(append([]string{"sealing-key", "ids"}, a...), io.Discard) },
	}
	types := map[string]bool{"": true, "string": true, "int": true, "uint": true, "int64": true, "uint64": true,
		"float": true, "duration": true, "value": true}
	flagLine := regexp.MustCompile(`^  -(\S+)(?: (.+))?$`)
	defer func(w io.Writer) { flagOutput = w }(flagOutput)
	for name, run := range commands {
		var out bytes.Buffer
		flagOutput = &out
		_ = run([]string{"-h"})
		flags := 0
		for _, l := range strings.Split(out.String(), "\n") {
			m := flagLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			flags++
			if !types[m[2]] {
				t.Errorf("%s -h: flag -%s takes %q, not a type", name, m[1], m[2])
			}
		}
		if flags == 0 {
			t.Errorf("%s -h printed no flags:\n%s", name, out.String())
		}
	}
}
