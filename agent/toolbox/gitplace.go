package toolbox

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Destinations PlaceTree takes.
const (
	PlacePlugin    = "plugin"     // wp-content/plugins/<folder>
	PlaceTheme     = "theme"      // wp-content/themes/<folder>
	PlaceWPContent = "wp-content" // the tree's top-level entries over wp-content's
)

// Bounds on one placed tree: its entries (git deploys are bounded lower,
// at the Library's 20,000 files) and a wp-content tree's top-level
// entries (each one an argument of the swap).
const (
	maxPlaceEntries = 100000
	maxPlaceTops    = 1000
)

var (
	// folderRE is a plain directory name: no separator, no "..", no
	// leading dot (nor a leading "-" a command could take for an option).
	folderRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$`)
	// topRE is a top-level entry a wp-content tree may place.
	topRE = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9._-]{0,254}$`)
)

// PlaceTree puts a tree (a tar stream of directories and regular files,
// such as gitdeploy's Tree.WriteTar writes) into a running site, inside
// the site's container as the site's user:
//
//   - PlacePlugin, PlaceTheme: the tar holds the tree under folderName/
//     and it becomes wp-content/plugins/<folderName> or
//     wp-content/themes/<folderName>, replacing what was there.
//   - PlaceWPContent: the tar holds the tree at its top (folderName is
//     not used) and each top-level entry replaces wp-content's entry of
//     that name; entries the tree lacks are kept, and so is uploads/
//     always: the tree's own uploads/ is not placed (the site's media
//     stay). A replaced mu-plugins/ gets the sandbox's mu-plugin back.
//
// The tree is unpacked into a staging directory inside wp-content and
// only then renamed into place (the old entries aside, the new ones in,
// the old ones removed): a failed unpack (a bad tar, the disk full, ctx
// ending) leaves the site as it was. Entries other than directories and
// regular files, and names that are absolute, hold "..", or fall outside
// folderName/, are refused (sites.ErrInvalid) before the site's tar sees them;
// that tar also runs with options that refuse them. sites.ErrDiskFull when the
// site's disk has no room; sites.ErrNotFound for an unknown site. Holds the
// site's lock, so it runs after (and before) other operations that hold
// it, an import's restore among them.
func (b *Box) PlaceTree(ctx context.Context, siteID, destination, folderName string, r io.Reader) error {
	parent := map[string]string{PlacePlugin: "plugins", PlaceTheme: "themes"}[destination]
	switch {
	case destination == PlaceWPContent:
		folderName = ""
	case parent == "":
		return fmt.Errorf("%w: destination %q (plugin, theme or wp-content)", sites.ErrInvalid, destination)
	case !folderRE.MatchString(folderName):
		return fmt.Errorf("%w: folder name %q: 1 to 100 letters, digits, '.', '_' or '-', not starting with '.' or '-'", sites.ErrInvalid, folderName)
	}
	unlock, err := b.sites.LockAwake(ctx, siteID)
	if err != nil {
		return err
	}
	defer unlock()
	s := b.sites.Get(siteID)
	if s == nil {
		return sites.ErrNotFound
	}
	if s.UID == 0 || s.Stopped {
		return fmt.Errorf("%w: site %s is not running", sites.ErrInvalid, siteID)
	}
	id := secret.New("")[:12]
	stage, old := ".sandbox-place-"+id, ".sandbox-old-"+id
	discard := func() {
		_, _ = b.sites.Exec(context.WithoutCancel(ctx), siteID, []string{"/bin/sh", "-c",
			`cd /srv/site/wordpress/wp-content && rm -rf -- "$1"`, "sh", stage}, nil)
	}
	tops, err := b.unpackTree(ctx, s, stage, folderName, r)
	if err != nil {
		discard()
		return err
	}
	if destination == PlaceWPContent {
		return b.swapEntries(ctx, s, stage, old, tops)
	}
	return b.swapFolder(ctx, s, stage, old, parent+"/"+folderName)
}

// unpackTree streams a clean copy of the tar into the site's tar, which
// unpacks it into wp-content/<stage>; it returns the tree's top-level
// entries (those to place).
func (b *Box) unpackTree(ctx context.Context, s *sites.Site, stage, folder string, r io.Reader) ([]string, error) {
	pr, pw := io.Pipe()
	type outcome struct {
		res []byte
		ok  bool
		err error
	}
	done := make(chan outcome, 1)
	// Owned by unpackTree: it ends when the site's tar does (at the
	// latest when pw is closed below, or ctx ends the exec).
	go func() {
		// What a placement killed midway staged goes first (the site's
		// lock is held: none runs now). GNU tar: no -P, so a leading "/"
		// is stripped and members with ".." refused; -k fails on a name
		// given twice; nothing of the archive's owners, permissions or
		// times is kept.
		res, err := b.sites.ExecReader(ctx, s.ID, []string{"/bin/sh", "-c",
			`set -e; cd /srv/site/wordpress/wp-content; rm -rf -- .sandbox-place-*; mkdir -- "$1"
exec tar -x -f - -C "$1" -k --no-same-owner --no-same-permissions --touch --delay-directory-restore --no-unquote`,
			"sh", stage}, pr)
		pr.CloseWithError(errors.New("the site's tar has ended"))
		if err != nil {
			done <- outcome{err: err}
			return
		}
		done <- outcome{res: res.Stderr, ok: res.ExitCode == 0}
	}()
	tops, copyErr := cleanTar(pw, r, folder)
	pw.CloseWithError(copyErr)
	out := <-done
	switch {
	case copyErr != nil && !errors.Is(copyErr, io.ErrClosedPipe) && !strings.Contains(copyErr.Error(), "the site's tar has ended"):
		return nil, copyErr
	case out.err != nil:
		return nil, fmt.Errorf("unpack in the site: %w", out.err)
	case !out.ok && strings.Contains(string(out.res), "No space left"):
		return nil, b.sites.DiskFullError(s.ID)
	case !out.ok:
		return nil, fmt.Errorf("%w: unpacking in the site failed: %.400s", sites.ErrInvalid, out.res)
	case copyErr != nil:
		return nil, copyErr
	}
	return tops, nil
}

// cleanTar copies the tar in r to w as a new tar of directories and
// regular files only, under checked names: for a folder, every entry
// must lie under folder/ (which is taken off); for wp-content, uploads/
// and its content are left out. It returns the top-level names written.
func cleanTar(w io.Writer, r io.Reader, folder string) ([]string, error) {
	src := &eofReader{r: r}
	tr, tw := tar.NewReader(src), tar.NewWriter(w)
	var tops []string
	seen := map[string]bool{}
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF && src.eof {
			// The stream ended where a header was due, without the
			// end-of-archive blocks: cut short, not complete.
			return nil, fmt.Errorf("%w: the tree's tar ends early", sites.ErrInvalid)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: the tree's tar: %v", sites.ErrInvalid, err)
		}
		if n >= maxPlaceEntries {
			return nil, fmt.Errorf("%w: the tree has more than %d entries", sites.ErrInvalid, maxPlaceEntries)
		}
		name, err := placeName(h.Name, folder)
		if err != nil {
			return nil, err
		}
		if name == "" {
			continue // folder/ itself: the staging directory is it
		}
		top, _, _ := strings.Cut(name, "/")
		if folder == "" {
			if top == "uploads" {
				continue
			}
			if !topRE.MatchString(top) || strings.HasPrefix(top, ".sandbox-") || top == "." {
				return nil, fmt.Errorf("%w: %q cannot be placed in wp-content", sites.ErrInvalid, top)
			}
		}
		if !seen[top] {
			seen[top] = true
			if len(tops) >= maxPlaceTops {
				return nil, fmt.Errorf("%w: the tree has more than %d top-level entries", sites.ErrInvalid, maxPlaceTops)
			}
			tops = append(tops, top)
		}
		out := &tar.Header{Name: name, ModTime: time.Now()}
		switch h.Typeflag {
		case tar.TypeDir:
			out.Typeflag, out.Name, out.Mode = tar.TypeDir, name+"/", 0o755
		case tar.TypeReg:
			out.Typeflag, out.Mode, out.Size = tar.TypeReg, 0o644, h.Size
			if h.Mode&0o111 != 0 {
				out.Mode = 0o755
			}
		default:
			return nil, fmt.Errorf("%w: %s is not a regular file or directory (nothing may link out of the tree)", sites.ErrInvalid, h.Name)
		}
		if err := tw.WriteHeader(out); err != nil {
			return nil, err
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return nil, fmt.Errorf("copy %s: %w", name, err)
			}
		}
	}
	if len(tops) == 0 {
		return nil, fmt.Errorf("%w: the tree is empty", sites.ErrInvalid)
	}
	return tops, tw.Close()
}

// eofReader notes when its reader has nothing more: a tar reader that
// has seen the end-of-archive blocks stops before that.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if n == 0 && err == io.EOF {
		e.eof = true
	}
	return n, err
}

// placeName checks an entry's name and returns it relative to the
// staging directory ("" for folder/ itself).
func placeName(name, folder string) (string, error) {
	clean := strings.TrimSuffix(name, "/")
	bad := clean == "" || strings.HasPrefix(clean, "/") || strings.ContainsAny(clean, "\x00\\") || path.Clean(clean) != clean
	for _, part := range strings.Split(clean, "/") {
		bad = bad || part == ".." || part == "."
	}
	if bad {
		return "", fmt.Errorf("%w: %q leaves the tree", sites.ErrInvalid, name)
	}
	if folder == "" {
		return clean, nil
	}
	if clean == folder {
		return "", nil
	}
	rel, ok := strings.CutPrefix(clean, folder+"/")
	if !ok {
		return "", fmt.Errorf("%w: %q is not under %s/", sites.ErrInvalid, name, folder)
	}
	return rel, nil
}

// swapFolder puts wp-content/<stage> in place of wp-content/<dest>.
func (b *Box) swapFolder(ctx context.Context, s *sites.Site, stage, old, dest string) error {
	script := `cd /srv/site/wordpress/wp-content || exit 1
stage=$1 old=$2 dest=$3
fail() { rm -rf -- "$stage"; exit 1; }
mkdir -p -- "${dest%/*}" || fail
if [ -e "$dest" ] || [ -L "$dest" ]; then mv -T -- "$dest" "$old" || fail; fi
if ! mv -T -- "$stage" "$dest"; then
	if [ -e "$old" ] || [ -L "$old" ]; then mv -T -- "$old" "$dest"; fi
	fail
fi
rm -rf -- "$old" || true`
	return b.runSwap(ctx, s, []string{"/bin/sh", "-c", script, "sh", stage, old, dest})
}

// swapEntries puts each of wp-content/<stage>'s top-level entries in
// place of wp-content's own; on a failure, what was moved goes back.
func (b *Box) swapEntries(ctx context.Context, s *sites.Site, stage, old string, tops []string) error {
	script := `cd /srv/site/wordpress/wp-content || exit 1
stage=$1 old=$2; shift 2
mkdir -- "$old" || { rm -rf -- "$stage"; exit 1; }
placed=""
undo() {
	for n in $placed; do
		rm -rf -- "./$n"
		if [ -e "$old/$n" ] || [ -L "$old/$n" ]; then mv -T -- "$old/$n" "./$n"; fi
	done
	rm -rf -- "$stage" "$old"
	exit 1
}
for n in "$@"; do
	if [ -e "./$n" ] || [ -L "./$n" ]; then mv -T -- "./$n" "$old/$n" || undo; fi
	placed="$placed $n"
	mv -T -- "$stage/$n" "./$n" || undo
done
case " $placed " in *" mu-plugins "*)
	mkdir -p mu-plugins && cp /srv/site/conf/sandbox-mu-plugin.php mu-plugins/sandbox.php || undo ;;
esac
rm -rf -- "$stage" "$old" || true`
	return b.runSwap(ctx, s, append([]string{"/bin/sh", "-c", script, "sh", stage, old}, tops...))
}

// runSwap runs a swap script; it is not cancelled with ctx (a swap half
// done is worse than one finished late).
func (b *Box) runSwap(ctx context.Context, s *sites.Site, argv []string) error {
	res, err := b.sites.Exec(context.WithoutCancel(ctx), s.ID, argv, nil)
	if err != nil {
		return fmt.Errorf("put the tree in place: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("put the tree in place: exit %d: %.400s", res.ExitCode, res.Stderr)
	}
	return nil
}
