package blueprint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// Bundle is a Blueprint uploaded as a ZIP with the files its bundled
// resources name.
type Bundle struct {
	// Source is the blueprint.json; ManifestDirectory the top-level
	// directory holding it ("" at the root). Files are the bundle's
	// files relative to that directory, with their sizes.
	Source            []byte
	ManifestDirectory string
	Files             map[string]int64
	Bytes             int64
}

// MaxBundle bounds a bundle ZIP, like a Library ZIP.
const MaxBundle = wpzip.MaxZipBytes

// maxManifest bounds blueprint.json.
const maxManifest = 512 << 10

// ErrBundle marks every refusal of a bundle; the message says why.
var ErrBundle = errors.New("invalid Blueprint bundle")

// ReadBundle checks a bundle by the Library's ZIP rules and finds its one
// blueprint.json: at the root, or in the one top-level directory that
// holds everything (macOS's __MACOSX folder aside).
func ReadBundle(zip []byte) (*Bundle, error) {
	if len(zip) > MaxBundle {
		return nil, fmt.Errorf("%w: larger than %d MiB", ErrBundle, MaxBundle>>20)
	}
	var manifests []string
	sources := map[string][]byte{}
	files := map[string]int64{}
	err := wpzip.Walk(zip, wpzip.DefaultLimits, func(name string, r io.Reader) error {
		if name == "__MACOSX" || strings.HasPrefix(name, "__MACOSX/") {
			return nil
		}
		if path.Base(name) == "blueprint.json" && strings.Count(name, "/") <= 1 {
			manifests = append(manifests, name)
			if len(manifests) > 1 {
				return fmt.Errorf("%w: %d blueprint.json files (%s); a bundle has exactly one", ErrBundle, len(manifests), strings.Join(manifests, ", "))
			}
			b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
			if err != nil {
				return err
			}
			if len(b) > maxManifest {
				return fmt.Errorf("%w: %s is larger than %d KiB", ErrBundle, name, maxManifest>>10)
			}
			sources[name] = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a BOM some editors write
		}
		if _, dup := files[name]; dup {
			return fmt.Errorf("%w: %s appears twice", ErrBundle, name)
		}
		n, err := io.Copy(io.Discard, r)
		files[name] = n + int64(len(sources[name]))
		return err
	})
	if err != nil {
		if errors.Is(err, ErrBundle) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", ErrBundle, strings.TrimPrefix(err.Error(), wpzip.ErrInvalid.Error()+": "))
	}
	candidates := manifests
	if len(candidates) == 0 {
		return nil, fmt.Errorf("%w: no blueprint.json at the root or in a top-level directory", ErrBundle)
	}
	b := &Bundle{Source: sources[candidates[0]], ManifestDirectory: path.Dir(candidates[0]), Files: map[string]int64{}}
	if b.ManifestDirectory == "." {
		b.ManifestDirectory = ""
	}
	for name, n := range files {
		rel := name
		if b.ManifestDirectory != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(name, b.ManifestDirectory+"/"); !ok {
				return nil, fmt.Errorf("%w: blueprint.json is in %s/, but %s is outside it", ErrBundle, b.ManifestDirectory, name)
			}
		}
		b.Files[rel] = n
		b.Bytes += n
	}
	return b, nil
}

// BundlePath is a bundled resource's path as a key of Bundle.Files;
// ok is false when it leaves the bundle.
func BundlePath(p string) (string, bool) {
	if !inBundle(p) {
		return "", false
	}
	return path.Clean(p), true
}
