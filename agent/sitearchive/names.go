package sitearchive

import (
	"strings"
)

// Bounds on names, well above what a real site uses and low enough that
// nothing downstream (tar, the kernel's PATH_MAX and NAME_MAX) chokes.
const (
	maxNameLen   = 4096
	maxComponent = 255
	maxDepth     = 64
)

// contentDir is the directory whose tree Read hands on.
const contentDir = "wp-content"

// splitName checks an archive name and returns its components, with a
// leading "./", "." and empty components dropped. The top directory
// itself ("./") has no components. In a ZIP, "\" separates components as
// "/" does.
func splitName(name string, zip bool) ([]string, error) {
	if zip {
		name = strings.ReplaceAll(name, `\`, "/")
	}
	switch {
	case strings.IndexByte(name, 0) >= 0:
		return nil, unsafe("name holds a NUL byte")
	case len(name) > maxNameLen:
		return nil, unsafe("name is longer than %d bytes", maxNameLen)
	case isAbs(name):
		return nil, unsafe("name is absolute")
	}
	comps := strings.Split(name, "/")
	out := comps[:0]
	for _, c := range comps {
		switch {
		case c == "" || c == ".":
			continue
		case c == "..":
			return nil, unsafe("name leaves the archive")
		case len(c) > maxComponent:
			return nil, unsafe("name has a component longer than %d bytes", maxComponent)
		}
		out = append(out, c)
	}
	if len(out) > maxDepth {
		return nil, unsafe("name is more than %d levels deep", maxDepth)
	}
	return out, nil
}

// isAbs reports a name that starts at a root: "/x", "//host/x", or a
// drive such as "C:/x" or "C:x".
func isAbs(name string) bool {
	if strings.HasPrefix(name, "/") {
		return true
	}
	if len(name) >= 2 && name[1] == ':' {
		c := name[0] | 0x20
		return c >= 'a' && c <= 'z'
	}
	return false
}

// splitContent finds the first component that is exactly wp-content and
// splits the name there into the site root (the components before it,
// joined) and rel (those after it).
func splitContent(comps []string) (root string, rel []string, ok bool) {
	for i, c := range comps {
		if c == contentDir {
			return strings.Join(comps[:i], "/"), comps[i+1:], true
		}
	}
	return "", nil, false
}

// linkTarget checks the target of a symlink at rel (components under
// wp-content) and returns it cleaned. The target must be relative and of
// the form "../../a/b": any ".." comes first, so resolving it lexically
// is also how the kernel resolves it (a ".." after a name would climb out
// of whatever that name is, perhaps another symlink), and it must not
// climb above wp-content.
func linkTarget(rel []string, target string, zip bool) (string, error) {
	if zip {
		target = strings.ReplaceAll(target, `\`, "/")
	}
	switch {
	case target == "":
		return "", unsafe("symlink has an empty target")
	case strings.IndexByte(target, 0) >= 0:
		return "", unsafe("symlink target holds a NUL byte")
	case len(target) > maxNameLen:
		return "", unsafe("symlink target is longer than %d bytes", maxNameLen)
	case isAbs(target):
		return "", unsafe("symlink target is absolute: symlink points outside the site")
	}
	var out []string
	up, down := 0, 0
	for _, c := range strings.Split(target, "/") {
		switch {
		case c == "" || c == ".":
			continue
		case c == "..":
			if down > 0 {
				return "", unsafe("symlink target climbs with .. after a name")
			}
			up++
		case len(c) > maxComponent:
			return "", unsafe("symlink target has a component longer than %d bytes", maxComponent)
		default:
			down++
		}
		out = append(out, c)
	}
	// The link lives in the directory rel[:len(rel)-1], that many levels
	// below wp-content.
	if up > len(rel)-1 {
		return "", unsafe("symlink points outside the site")
	}
	if len(out) == 0 {
		return ".", nil
	}
	return strings.Join(out, "/"), nil
}

// LinkStaysInside reports whether a symlink that a tar holds under the
// name name (under wp-content/) with this target stays inside wp-content,
// as Read requires of every link it takes: a site's snapshot leaves out
// the links its restore would refuse.
func LinkStaysInside(name, target string) bool {
	comps, err := splitName(name, false)
	if err != nil {
		return false
	}
	_, rel, ok := splitContent(comps)
	if !ok || len(rel) == 0 {
		return false
	}
	_, err = linkTarget(rel, target, false)
	return err == nil
}

// isDump reports whether a file name is an SQL dump's.
func isDump(base string) bool {
	b := strings.ToLower(base)
	return strings.HasSuffix(b, ".sql") || strings.HasSuffix(b, ".sql.gz")
}

// isGzipDump reports whether a dump is gzip-compressed.
func isGzipDump(base string) bool {
	return strings.HasSuffix(strings.ToLower(base), ".sql.gz")
}

// showRoot renders a root for a message: "public_html/", or "./" for the
// top.
func showRoot(root string) string {
	if root == "" {
		return "./"
	}
	return root + "/"
}
