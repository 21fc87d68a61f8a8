package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// cgroupRoot is where the host's cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// Namespace is the containerd namespace the runtime works in; its
// containers' cgroups are under a directory of that name.
func (r *Runtime) Namespace() string { return r.ns }

// CgroupDirs are the cgroup directories of a container of namespace ns
// (v2: one; v1: one per controller), whether they exist or not.
func CgroupDirs(ns, id string) []string {
	return cgroupDirs(filepath.Join(ns, id))
}

// CgroupDirs are the cgroup directories of the container this Runtime
// calls id.
func (r *Runtime) CgroupDirs(id string) []string { return CgroupDirs(r.ns, r.cid(id)) }

func cgroupDirs(rel string) []string {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return []string{filepath.Join(cgroupRoot, rel)} // v2
	}
	ctrls, _ := os.ReadDir(cgroupRoot)
	var out []string
	for _, c := range ctrls {
		// v1: a directory per controller (links such as cpu ->
		// cpu,cpuacct name the same one twice and are not directories).
		if c.IsDir() {
			out = append(out, filepath.Join(cgroupRoot, c.Name(), rel))
		}
	}
	return out
}

// RemoveNamespaceCgroups removes the cgroup directories runc leaves for a
// namespace once its containers are gone (each container's own goes with
// it, their parent of the namespace's name does not). One still holding
// a container is left alone.
func RemoveNamespaceCgroups(ns string) error {
	if ns == "" || ns != filepath.Base(ns) || ns == "." || ns == ".." {
		return fmt.Errorf("runtime: invalid namespace %q", ns)
	}
	var errs []error
	for _, d := range cgroupDirs(ns) {
		err := syscall.Rmdir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("runtime: remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
