package blueprintrun

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Bounds on what one step fetches and sends to its site.
const (
	maxStepBytes    = 60 << 20 // under the agent's request cap
	maxResource     = 60 << 20
	maxAttachments  = 200
	maxAttachment   = 16 << 20
	maxGitFiles     = 5000
	maxDirFiles     = 5000
	gitCloneTimeout = 5 * 60 // seconds
	// maxGitPack bounds any file git writes while fetching.
	maxGitPack = 256 << 20
)

// resolver turns a step's resources into blobs for its site.
type resolver struct {
	r      *Runner
	run    *state.BlueprintRun
	site   *state.Site
	bundle []byte // read once, when a bundled resource needs it
	log    []string
}

// prepared is a step as the agent takes it.
type prepared struct {
	args   map[string]any
	blobs  [][]byte
	total  int64
	extras map[string]any
}

func (p *prepared) add(b []byte) (int, error) {
	if p.total+int64(len(b)) > maxStepBytes {
		return 0, fmt.Errorf("the step's resources add up to more than %d MiB", maxStepBytes>>20)
	}
	p.total += int64(len(b))
	p.blobs = append(p.blobs, b)
	return len(p.blobs) - 1, nil
}

func (res *resolver) note(format string, args ...any) {
	res.log = append(res.log, fmt.Sprintf(format, args...)+"\n")
}

// notes returns and forgets what the resolver noted for the step.
func (res *resolver) notes() string {
	s := strings.Join(res.log, "")
	res.log = nil
	return s
}

// resourceKeys are the step properties that hold resources, with the
// properties that hold either a resource or inline text.
var resourceKeys = map[string][]string{
	"installPlugin": {"pluginData", "pluginZipFile"}, "installTheme": {"themeData", "themeZipFile"},
	"importWxr": {"file"}, "runPHP": {"code"}, "runSql": {"sql"}, "unzip": {"zipFile"},
	"writeFile": {"data"}, "writeFiles": {"filesTree"}, "importWordPressFiles": {"wordPressFilesZip"},
}

func (res *resolver) prepare(ctx context.Context, s blueprint.Step) (*prepared, error) {
	p := &prepared{args: map[string]any{}, extras: map[string]any{}}
	for k, v := range s.Args {
		p.args[k] = v
	}
	for _, k := range resourceKeys[s.Name] {
		v, ok := p.args[k]
		if !ok {
			continue
		}
		if _, isText := v.(string); isText {
			continue // inline code, SQL or file contents
		}
		ref, err := res.resource(ctx, p, k, v)
		if err != nil {
			return nil, err
		}
		p.args[k] = ref
	}
	// The deprecated names arrive as the current ones.
	for old, cur := range map[string]string{"pluginZipFile": "pluginData", "themeZipFile": "themeData"} {
		if v, ok := p.args[old]; ok {
			if _, has := p.args[cur]; !has {
				p.args[cur] = v
			}
			delete(p.args, old)
		}
	}
	switch s.Name {
	case "importWxr":
		if err := res.attachments(ctx, p); err != nil {
			return nil, err
		}
	case "wp-cli":
		if err := res.wpCLI(ctx, p); err != nil {
			return nil, err
		}
	case "setSiteLanguage":
		if err := res.languagePacks(ctx, p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// resource resolves one resource value into a reference the agent reads.
func (res *resolver) resource(ctx context.Context, p *prepared, where string, v any) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a resource", where)
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	file := func(b []byte, name string) (any, error) {
		i, err := p.add(b)
		if err != nil {
			return nil, err
		}
		return map[string]any{"$file": i, "name": name}, nil
	}
	switch typ := str("resource"); typ {
	case "url":
		u := str("url")
		b, err := res.r.cfg.Fetch(ctx, u, maxResource)
		if err != nil {
			return nil, fmt.Errorf("cannot fetch %s: %v", u, err)
		}
		res.note("fetched %s (%d bytes)", u, len(b))
		return file(b, urlName(u))
	case "wordpress.org/plugins", "wordpress.org/themes":
		slug := str("slug")
		kind := "plugin"
		if typ == "wordpress.org/themes" {
			kind = "theme"
		}
		// The workspace's own Library entry of that slug comes first.
		if e, err := res.r.cfg.Store.LibraryEntry(res.run.WorkspaceID, slug); err == nil && e != nil && e.Kind == kind && e.BlobSHA256 != "" && res.r.cfg.Blob != nil {
			if b, err := res.r.cfg.Blob(ctx, e.BlobSHA256); err == nil {
				res.note("%s %s: from the workspace's Library", kind, slug)
				return file(b, slug+".zip")
			}
		}
		u := blueprint.DirectoryURL(typ, slug)
		b, err := res.r.cfg.Fetch(ctx, u, maxResource)
		if err != nil {
			return nil, fmt.Errorf("cannot fetch the %s %q (%s): %v", kind, slug, u, err)
		}
		res.note("fetched %s %s (%d bytes)", kind, slug, len(b))
		return file(b, slug+".zip")
	case "vfs":
		return map[string]any{"$vfs": str("path")}, nil
	case "literal":
		return file([]byte(str("contents")), str("name"))
	case "bundled":
		b, err := res.bundled(ctx, str("path"))
		if err != nil {
			return nil, err
		}
		return file(b, path.Base(str("path")))
	case "zip":
		files, name, err := res.materialize(ctx, m["inner"])
		if err != nil {
			return nil, err
		}
		z, err := zipOf(files)
		if err != nil {
			return nil, err
		}
		if n := str("name"); n != "" {
			name = n
		}
		return file(z, strings.TrimSuffix(name, ".zip")+".zip")
	case "git:directory", "literal:directory":
		files, name, err := res.materialize(ctx, m)
		if err != nil {
			return nil, err
		}
		tree := map[string]any{}
		for _, f := range slices.Sorted(maps.Keys(files)) {
			i, err := p.add(files[f])
			if err != nil {
				return nil, err
			}
			tree[f] = i
		}
		return map[string]any{"$dir": map[string]any{"name": name, "files": tree}}, nil
	default:
		return nil, fmt.Errorf("%s: resource type %q cannot be fetched here", where, typ)
	}
}

// materialize reads a resource as files (a directory resource's tree, or
// one file under its name).
func (res *resolver) materialize(ctx context.Context, v any) (map[string][]byte, string, error) {
	m, _ := v.(map[string]any)
	str := func(k string) string { s, _ := m[k].(string); return s }
	switch str("resource") {
	case "literal:directory":
		files := map[string][]byte{}
		if err := literalTree(files, "", m["files"], 0); err != nil {
			return nil, "", err
		}
		return files, str("name"), nil
	case "git:directory":
		return res.git(ctx, str("url"), str("ref"), str("refType"), str("path"))
	}
	var p prepared
	ref, err := res.resource(ctx, &p, "inner", v)
	if err != nil {
		return nil, "", err
	}
	r, _ := ref.(map[string]any)
	if i, ok := r["$file"].(int); ok {
		name, _ := r["name"].(string)
		return map[string][]byte{name: p.blobs[i]}, name, nil
	}
	return nil, "", fmt.Errorf("a zip resource wraps a file or a directory, not a file already in the site")
}

func literalTree(out map[string][]byte, prefix string, v any, depth int) error {
	m, ok := v.(map[string]any)
	if !ok || depth > 20 {
		return fmt.Errorf("literal:directory files must be nested objects of names to strings")
	}
	for name, c := range m {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
			return fmt.Errorf("literal:directory has a bad file name %q", name)
		}
		p := path.Join(prefix, name)
		switch c := c.(type) {
		case string:
			if len(out) >= maxDirFiles {
				return fmt.Errorf("literal:directory has more than %d files", maxDirFiles)
			}
			out[p] = []byte(c)
		default:
			if err := literalTree(out, p, c, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// bundled reads a file of the run's bundle.
func (res *resolver) bundled(ctx context.Context, p string) ([]byte, error) {
	clean, ok := blueprint.BundlePath(p)
	if !ok {
		return nil, fmt.Errorf("the bundled path %q leaves the bundle", p)
	}
	if res.run.BundleSHA256 == "" {
		return nil, fmt.Errorf("the bundled resource %q needs the Blueprint uploaded as a bundle", p)
	}
	if res.bundle == nil {
		b, err := res.r.cfg.Blob(ctx, res.run.BundleSHA256)
		if err != nil {
			return nil, fmt.Errorf("the Blueprint's bundle cannot be read: %v", err)
		}
		res.bundle = b
	}
	bundle, err := blueprint.ReadBundle(res.bundle)
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(res.bundle), int64(len(res.bundle)))
	if err != nil {
		return nil, err
	}
	want := clean
	if bundle.ManifestDirectory != "" {
		want = bundle.ManifestDirectory + "/" + clean
	}
	for _, f := range zr.File {
		if path.Clean(f.Name) != want || f.FileInfo().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		b, err := io.ReadAll(io.LimitReader(rc, maxResource+1))
		if err != nil {
			return nil, err
		}
		if len(b) > maxResource {
			return nil, fmt.Errorf("the bundled file %q is larger than %d MiB", p, maxResource>>20)
		}
		return b, nil
	}
	return nil, fmt.Errorf("the bundle has no file %q", p)
}

// git fetches a git:directory resource with the real git and reads the
// tree at path from git's objects: nothing is checked out, so no link in
// the repository is ever followed, and every file's size is known (and
// bounded) before it is read.
func (res *resolver) git(ctx context.Context, raw, ref, refType, sub string) (map[string][]byte, string, error) {
	if res.r.cfg.GitURL == nil {
		return nil, "", fmt.Errorf("git:directory resources are not enabled here")
	}
	u, pin, err := res.r.cfg.GitURL(ctx, raw)
	if err != nil {
		return nil, "", fmt.Errorf("cannot clone %s: %v", raw, err)
	}
	if ref == "" || strings.HasPrefix(ref, "-") || strings.ContainsAny(ref, " \x00") {
		return nil, "", fmt.Errorf("git ref %q is not usable", ref)
	}
	dir, err := os.MkdirTemp("", "sandboxd-git-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	// git resolves names by itself: it is held to the address checked,
	// and sees no proxy, no user or system configuration, no helpers.
	conf := []string{"-c", "http.followRedirects=false", "-c", "protocol.allow=never", "-c", "protocol.http.allow=always",
		"-c", "protocol.https.allow=always", "-c", "http.proxy=", "-c", "credential.helper=", "-c", "core.hooksPath=/dev/null"}
	if pin != "" {
		conf = append(conf, "-c", "http.curloptResolve="+pin)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_ALLOW_PROTOCOL=http:https"}
	run := func(args ...string) ([]byte, error) {
		// Bounded in time and in the size of any file git writes (its pack).
		argv := append([]string{"-c", fmt.Sprintf(`ulimit -f %d; exec timeout %d git "$@"`, maxGitPack/512, gitCloneTimeout), "sh"}, conf...)
		cmd := exec.CommandContext(ctx, "sh", append(argv, args...)...)
		cmd.Dir, cmd.Env = dir, env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(clip(errb.String(), 500)))
		}
		return out.Bytes(), nil
	}
	if _, err := run("init", "--quiet", "--bare", "."); err != nil {
		return nil, "", err
	}
	fetchRef := ref
	switch refType {
	case "branch":
		fetchRef = "refs/heads/" + ref
	case "tag":
		fetchRef = "refs/tags/" + ref
	}
	if _, err := run("fetch", "--quiet", "--no-tags", "--", u, fetchRef); err != nil {
		return nil, "", fmt.Errorf("cannot fetch %s of %s: %v", ref, raw, err)
	}
	res.note("fetched %s at %s", raw, ref)
	clean := ""
	if sub != "" {
		clean = path.Clean("/" + sub)[1:]
	}
	args := []string{"ls-tree", "-r", "-l", "-z", "FETCH_HEAD"}
	if clean != "" {
		args = append(args, "--", clean)
	}
	list, err := run(args...)
	if err != nil {
		return nil, "", err
	}
	type blob struct{ sha, rel string }
	var blobs []blob
	var total int64
	for _, e := range bytes.Split(list, []byte{0}) {
		meta, name, ok := strings.Cut(string(e), "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 || f[1] != "blob" || (f[0] != "100644" && f[0] != "100755") {
			continue // links, submodules: never read
		}
		rel := name
		if clean != "" {
			if !strings.HasPrefix(name, clean+"/") {
				continue
			}
			rel = strings.TrimPrefix(name, clean+"/")
		}
		size, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			continue
		}
		if total += size; total > maxResource {
			return nil, "", fmt.Errorf("git:directory %s: the files are larger than %d MiB", raw, maxResource>>20)
		}
		if len(blobs) >= maxGitFiles {
			return nil, "", fmt.Errorf("git:directory %s: more than %d files", raw, maxGitFiles)
		}
		blobs = append(blobs, blob{f[2], rel})
	}
	if len(blobs) == 0 {
		return nil, "", fmt.Errorf("git:directory %s has no files at %q", raw, sub)
	}
	files := map[string][]byte{}
	for _, b := range blobs {
		data, err := run("cat-file", "blob", b.sha)
		if err != nil {
			return nil, "", err
		}
		files[b.rel] = data
	}
	name := path.Base(strings.TrimSuffix(strings.TrimSuffix(raw, "/"), ".git"))
	if clean != "" {
		name = path.Base(clean)
	}
	return files, name, nil
}

func zipOf(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		f, err := w.Create(n)
		if err != nil {
			return nil, err
		}
		if _, err := f.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func urlName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "resource"
	}
	n := path.Base(u.Path)
	if n == "/" || n == "." || n == "" {
		return "resource"
	}
	return n
}

var attachmentRE = regexp.MustCompile(`<wp:attachment_url>\s*(?:<!\[CDATA\[)?\s*(.*?)\s*(?:\]\]>)?\s*</wp:attachment_url>`)

// attachments fetches the files an importWxr step's attachments name.
func (res *resolver) attachments(ctx context.Context, p *prepared) error {
	if v, ok := p.args["fetchAttachments"].(bool); ok && !v {
		return nil
	}
	ref, _ := p.args["file"].(map[string]any)
	i, ok := ref["$file"].(int)
	if !ok {
		return nil // a file in the site: its attachments are the site's to have
	}
	got := map[string]int{}
	missed := 0
	for _, m := range attachmentRE.FindAllSubmatch(p.blobs[i], -1) {
		u := string(m[1])
		if _, done := got[u]; done || u == "" {
			continue
		}
		if len(got)+missed >= maxAttachments {
			res.note("more than %d attachments: the rest are imported without their files", maxAttachments)
			break
		}
		b, err := res.r.cfg.Fetch(ctx, u, maxAttachment)
		if err == nil {
			var j int
			if j, err = p.add(b); err == nil {
				got[u] = j
				continue
			}
		}
		missed++
		res.note("attachment %s not fetched: %v", u, err)
	}
	if len(got) > 0 {
		p.extras["attachments"] = got
	}
	return nil
}

// wpCLI splits the command (no shell) and fetches what its plugin, theme
// and media arguments name.
func (res *resolver) wpCLI(ctx context.Context, p *prepared) error {
	cmd, _ := p.args["command"].(string)
	argv, err := blueprint.SplitCommand(cmd)
	if err != nil {
		return fmt.Errorf("command: %v", err)
	}
	if len(argv) > 0 && argv[0] == "wp" {
		argv = argv[1:]
	}
	p.args["argv"] = argv
	var words []string
	for _, a := range argv {
		if !strings.HasPrefix(a, "-") {
			words = append(words, a)
		}
	}
	if len(words) < 3 {
		return nil
	}
	fetched := map[string]any{}
	get := func(arg, u, name string) error {
		b, err := res.r.cfg.Fetch(ctx, u, maxResource)
		if err != nil {
			return fmt.Errorf("cannot fetch %s: %v", arg, err)
		}
		i, err := p.add(b)
		if err != nil {
			return err
		}
		res.note("fetched %s (%d bytes)", arg, len(b))
		fetched[arg] = map[string]any{"$file": i, "name": name}
		return nil
	}
	isURL := func(s string) bool { return strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") }
	switch {
	case (words[0] == "plugin" || words[0] == "theme") && words[1] == "install":
		typ := "wordpress.org/" + words[0] + "s"
		for _, a := range words[2:] {
			switch {
			case isURL(a):
				if err := get(a, a, urlName(a)); err != nil {
					return err
				}
			case strings.HasSuffix(a, ".zip"):
				// a ZIP in the site
			default:
				if err := get(a, blueprint.DirectoryURL(typ, a), a+".zip"); err != nil {
					return err
				}
			}
		}
	case words[0] == "media" && words[1] == "import":
		for _, a := range words[2:] {
			if isURL(a) {
				if err := get(a, a, urlName(a)); err != nil {
					return err
				}
			}
		}
	}
	if len(fetched) > 0 {
		p.extras["fetched"] = fetched
	}
	return nil
}

// languagePacks fetches WordPress's translation of the site's version.
func (res *resolver) languagePacks(ctx context.Context, p *prepared) error {
	lang, _ := p.args["language"].(string)
	if lang == "" || lang == "en_US" || lang == "en" {
		return nil
	}
	if !regexp.MustCompile(`^[a-z]{2,3}(_[A-Z]{2})?(_[a-z]+)?$`).MatchString(lang) {
		return fmt.Errorf("%q is not a WordPress locale (like ja or pt_BR)", lang)
	}
	wp := res.site.WordPressVersion
	u := "https://downloads.wordpress.org/translation/core/" + wp + "/" + lang + ".zip"
	b, err := res.r.cfg.Fetch(ctx, u, maxResource)
	if err != nil {
		return fmt.Errorf("no %s translation of WordPress %s could be fetched (%s): %v", lang, wp, u, err)
	}
	i, err := p.add(b)
	if err != nil {
		return err
	}
	res.note("fetched the %s translation of WordPress %s", lang, wp)
	p.extras["languagePacks"] = []map[string]any{{"type": "core", "$file": i, "name": lang + ".zip"}}
	return nil
}
