package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Mirror finds the Debian archive this machine installs from, in its apt
// sources (deb822 .sources files or one-line .list files), so no mirror
// host is ever written into the project.
func Mirror(root string) (string, error) {
	var files []string
	if f := filepath.Join(root, "etc/apt/sources.list"); exists(f) {
		files = append(files, f)
	}
	for _, pattern := range []string{"*.sources", "*.list"} {
		m, _ := filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d", pattern))
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", f, err)
		}
		var uri string
		if strings.HasSuffix(f, ".sources") {
			uri = fromDeb822(string(data))
		} else {
			uri = fromOneLine(string(data))
		}
		if uri != "" {
			return strings.TrimRight(uri, "/"), nil
		}
	}
	return "", fmt.Errorf("no Debian archive found in %s/etc/apt sources", root)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// mainSuite reports whether a suite is a release itself, not its
// -updates, -security or -backports companion.
func mainSuite(s string) bool { return s != "" && !strings.Contains(s, "-") }

func fromDeb822(text string) string {
	for _, stanza := range strings.Split(text, "\n\n") {
		fields := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(stanza))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if fields["enabled"] == "no" || !strings.Contains(" "+fields["types"]+" ", " deb ") {
			continue
		}
		for _, suite := range strings.Fields(fields["suites"]) {
			if mainSuite(suite) {
				if uris := strings.Fields(fields["uris"]); len(uris) > 0 {
					return uris[0]
				}
			}
		}
	}
	return ""
}

func fromOneLine(text string) string {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		i := 1
		if strings.HasPrefix(f[1], "[") { // options: [arch=amd64 signed-by=…]
			for i < len(f) && !strings.HasSuffix(f[i], "]") {
				i++
			}
			i++
		}
		if i+1 < len(f) && mainSuite(f[i+1]) {
			return f[i]
		}
	}
	return ""
}
