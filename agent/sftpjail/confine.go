package sftpjail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// confine makes this process a prisoner of root as uid:gid: a file limit,
// chroot to root (its last component must not be a symlink), no
// supplementary groups, the site's gid and uid (Go applies them to every
// thread), then checks that every thread holds exactly that and no
// capability. Any failure is returned and the caller must not serve.
func confine(root string, uid, gid int) error {
	if uid <= 0 || gid <= 0 {
		return fmt.Errorf("uid %d, gid %d: a site never runs as root", uid, gid)
	}
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return fmt.Errorf("root %q must be a clean absolute path", root)
	}
	lim := syscall.Rlimit{Cur: MaxOpenFiles, Max: MaxOpenFiles}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("limit open files: %w", err)
	}
	// Opened before the chroot so every thread can be checked after it;
	// closed before serving.
	tasks, err := unix.Open("/proc/self/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /proc/self/task: %w", err)
	}
	defer unix.Close(tasks)
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open root %s: %w", root, err)
	}
	var want unix.Stat_t
	err = unix.Fstat(dir, &want)
	if err == nil {
		err = unix.Fchdir(dir)
	}
	unix.Close(dir)
	if err != nil {
		return fmt.Errorf("enter root %s: %w", root, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("drop groups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	unix.Umask(0o022)
	var got unix.Stat_t
	if err := unix.Stat("/", &got); err != nil || got.Dev != want.Dev || got.Ino != want.Ino {
		return fmt.Errorf("/ is not %s after chroot (%v)", root, err)
	}
	if wd, err := os.Getwd(); err != nil || wd != "/" {
		return fmt.Errorf("working directory %q after chroot (%v)", wd, err)
	}
	return checkDropped(tasks, uid, gid)
}

// checkDropped verifies the credentials of the process and of each of its
// threads (listed through tasks, an fd on /proc/self/task).
func checkDropped(tasks, uid, gid int) error {
	r, e, s := unix.Getresuid()
	if r != uid || e != uid || s != uid {
		return fmt.Errorf("uids %d/%d/%d, want %d", r, e, s, uid)
	}
	r, e, s = unix.Getresgid()
	if r != gid || e != gid || s != gid {
		return fmt.Errorf("gids %d/%d/%d, want %d", r, e, s, gid)
	}
	if g, err := unix.Getgroups(); err != nil || len(g) != 0 {
		return fmt.Errorf("supplementary groups %v left (%v)", g, err)
	}
	dup, err := unix.Dup(tasks)
	if err != nil {
		return fmt.Errorf("dup /proc/self/task: %w", err)
	}
	d := os.NewFile(uintptr(dup), "/proc/self/task")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list threads: %w", err)
	}
	u, g := strconv.Itoa(uid), strconv.Itoa(gid)
	want := map[string]string{
		"Uid":        strings.Join([]string{u, u, u, u}, "\t"),
		"Gid":        strings.Join([]string{g, g, g, g}, "\t"),
		"Groups":     "",
		"CapInh":     "0000000000000000",
		"CapPrm":     "0000000000000000",
		"CapEff":     "0000000000000000",
		"CapAmb":     "0000000000000000",
		"NoNewPrivs": "1",
	}
	for _, tid := range names {
		fd, err := unix.Openat(tasks, tid+"/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue // the thread is gone
		}
		if err != nil {
			return fmt.Errorf("thread %s status: %w", tid, err)
		}
		f := os.NewFile(uintptr(fd), tid)
		b, err := io.ReadAll(io.LimitReader(f, 64<<10))
		f.Close()
		if err != nil {
			return fmt.Errorf("thread %s status: %w", tid, err)
		}
		seen := 0
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			w, known := want[k]
			if !ok || !known {
				continue
			}
			if v = strings.TrimSpace(v); v != w {
				return fmt.Errorf("thread %s: %s is %q, want %q", tid, k, v, w)
			}
			seen++
		}
		if seen != len(want) {
			return fmt.Errorf("thread %s: status lacks fields", tid)
		}
	}
	return nil
}
