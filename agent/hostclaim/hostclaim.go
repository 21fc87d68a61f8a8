// Package hostclaim hands out numbered resources that must be unique on a
// host across every agent running there: a site's uid, an agent's site
// subnet. A claim is a file named by the number in a host-wide directory,
// created with O_EXCL, holding the path of the file that owns it. A claim
// whose owner file is gone (a data dir removed without deleting its sites)
// is stale and is taken over, so leftovers never exhaust the range.
package hostclaim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultDir is where claims live unless an agent is told otherwise.
const DefaultDir = "/var/lib/sandboxd/claims"

// ErrExhausted means every number of the range is held by a live owner.
var ErrExhausted = errors.New("no free number left in the range")

// Registry is one kind of claim (e.g. "uid") under a host-wide directory.
type Registry struct {
	dir        string
	first, end int // [first, end)
}

// Open returns the registry of kind under dir for numbers [first, first+count).
func Open(dir, kind string, first, count int) (*Registry, error) {
	if first < 0 || count <= 0 {
		return nil, fmt.Errorf("hostclaim: bad range %d+%d", first, count)
	}
	d := filepath.Join(dir, kind)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, fmt.Errorf("hostclaim: %w", err)
	}
	return &Registry{dir: d, first: first, end: first + count}, nil
}

// Claim returns a number held for owner: the one owner already holds, or
// the lowest free (or stale) one. owner must be an absolute path of a file
// that exists for as long as the claim is needed.
func (r *Registry) Claim(owner string) (int, error) {
	if !filepath.IsAbs(owner) {
		return 0, fmt.Errorf("hostclaim: owner %q is not an absolute path", owner)
	}
	if n, ok := r.Held(owner); ok {
		return n, nil
	}
	unlock, err := r.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	held := r.scan()
	for n := r.first; n < r.end; n++ {
		o, ok := held[n]
		if ok && o != owner && !stale(o) {
			continue
		}
		if err := r.write(n, owner); err != nil {
			return 0, err
		}
		return n, nil
	}
	return 0, fmt.Errorf("hostclaim %s [%d,%d): %w", filepath.Base(r.dir), r.first, r.end, ErrExhausted)
}

// ClaimNumber holds n for owner if it is free, stale or already owner's.
func (r *Registry) ClaimNumber(n int, owner string) error {
	if n < r.first || n >= r.end {
		return fmt.Errorf("hostclaim: %d is outside [%d,%d)", n, r.first, r.end)
	}
	unlock, err := r.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if o, ok := r.scan()[n]; ok && o != owner && !stale(o) {
		return fmt.Errorf("hostclaim: %d is held by %s", n, o)
	}
	return r.write(n, owner)
}

// Held returns the number owner holds, if any.
func (r *Registry) Held(owner string) (int, bool) {
	for n, o := range r.scan() {
		if o == owner {
			return n, true
		}
	}
	return 0, false
}

// Release gives up every number owner holds; holding none is fine.
func (r *Registry) Release(owner string) error {
	var errs []error
	for n, o := range r.scan() {
		if o == owner {
			if err := os.Remove(r.path(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ReleaseUnder gives up every number whose owner lies under dir: what a
// data dir held, when it is purged.
func (r *Registry) ReleaseUnder(dir string) error {
	dir = filepath.Clean(dir) + string(filepath.Separator)
	var errs []error
	for n, o := range r.scan() {
		if strings.HasPrefix(o, dir) {
			if err := os.Remove(r.path(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Others returns the numbers held by live owners other than owner.
func (r *Registry) Others(owner string) []int {
	var out []int
	for n, o := range r.scan() {
		if o != owner && !stale(o) {
			out = append(out, n)
		}
	}
	return out
}

func (r *Registry) path(n int) string { return filepath.Join(r.dir, strconv.Itoa(n)) }

// scan reads every claim of the range; unreadable entries are skipped.
func (r *Registry) scan() map[int]string {
	out := map[int]string{}
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < r.first || n >= r.end {
			continue
		}
		b, err := os.ReadFile(r.path(n))
		if err != nil {
			continue
		}
		out[n] = strings.TrimSpace(string(b))
	}
	return out
}

func (r *Registry) write(n int, owner string) error {
	tmp := filepath.Join(r.dir, ".tmp-"+strconv.Itoa(n))
	if err := os.WriteFile(tmp, []byte(owner+"\n"), 0o600); err != nil {
		return fmt.Errorf("hostclaim: %w", err)
	}
	if err := os.Rename(tmp, r.path(n)); err != nil {
		return fmt.Errorf("hostclaim: %w", err)
	}
	return nil
}

// lock serialises claims across processes with flock on the directory.
func (r *Registry) lock() (func(), error) {
	f, err := os.Open(r.dir)
	if err != nil {
		return nil, fmt.Errorf("hostclaim: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("hostclaim: lock: %w", err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// stale reports whether a claim's owner file is gone.
func stale(owner string) bool {
	_, err := os.Lstat(owner)
	return errors.Is(err, os.ErrNotExist)
}
