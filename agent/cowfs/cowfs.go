// Package cowfs gives a site a copy-on-write WordPress tree over a frozen
// template: the template's directory, owned by the uid of the site it
// was frozen from, is mounted id-mapped so that its files appear owned
// by the new site's uid, read-only, as the lower layer of an overlay
// whose upper layer is on the site's own disk. Fifty clones of one
// template read one set of files (one page cache) and write only their
// own changes; the template itself can never be written through them.
package cowfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Layout is the directories of one site's tree.
type Layout struct {
	// Lower is the frozen template tree; its files belong to LowerUID.
	Lower    string
	LowerUID int
	// Upper and Work are on the site's disk, which the site's writes
	// count against; SiteUID owns them.
	Upper, Work string
	SiteUID     int
	// Mapped is where the id-mapped view of Lower is mounted (root-owned,
	// outside anything the site can reach); Target is the merged tree.
	Mapped, Target string
}

// Mount mounts the site's tree at l.Target. Mounting a tree that is
// already mounted is refused by the kernel; Unmount first.
func Mount(l Layout) error {
	if l.LowerUID <= 0 || l.SiteUID <= 0 {
		return errors.New("cowfs: template and site need uids of their own (not root)")
	}
	for _, d := range []struct {
		path string
		uid  int
		mode os.FileMode
	}{{l.Upper, l.SiteUID, 0o755}, {l.Work, 0, 0o700}, {l.Mapped, 0, 0o700}, {l.Target, 0, 0o755}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("cowfs: %w", err)
		}
		if err := os.Lchown(d.path, d.uid, d.uid); err != nil {
			return fmt.Errorf("cowfs: %w", err)
		}
	}
	if err := mapTree(l.Lower, l.Mapped, l.LowerUID, l.SiteUID); err != nil {
		return err
	}
	opts := "lowerdir=" + l.Mapped + ",upperdir=" + l.Upper + ",workdir=" + l.Work
	if err := unix.Mount("overlay", l.Target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		_ = unix.Unmount(l.Mapped, unix.MNT_DETACH)
		return fmt.Errorf("cowfs: overlay at %s: %w", l.Target, err)
	}
	return nil
}

// Unmount takes the merged tree and the mapped view down; what is not
// mounted is fine.
func Unmount(l Layout) error {
	var errs []error
	for _, p := range []string{l.Target, l.Mapped} {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("cowfs: unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// mapTree mounts src at dst read-only, with files of uid from appearing
// as uid to (and gid likewise). The mapping comes from a user namespace
// made for it by a short-lived child; the mount keeps the namespace.
func mapTree(src, dst string, from, to int) error {
	userns, done, err := userNamespace(from, to)
	if err != nil {
		return err
	}
	defer done()
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("cowfs: open_tree %s: %w", src, err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("cowfs: id-map %s: %w", src, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("cowfs: mount %s: %w", dst, err)
	}
	return nil
}

// userNamespace returns a user namespace mapping uid and gid from to to
// (one id each), held by a child that waits on its stdin; done ends it.
func userNamespace(from, to int) (*os.File, func(), error) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		return nil, nil, fmt.Errorf("cowfs: %w", err)
	}
	cmd := exec.Command(cat)
	cmd.Dir = "/"
	cmd.Env = []string{}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, Pdeathsig: syscall.SIGKILL,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: from, HostID: to, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: from, HostID: to, Size: 1}}}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("cowfs: user namespace: %w", err)
	}
	stop := func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	ns, err := os.Open(filepath.Join("/proc", fmt.Sprint(cmd.Process.Pid), "ns", "user"))
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("cowfs: user namespace: %w", err)
	}
	return ns, func() { ns.Close(); stop() }, nil
}
