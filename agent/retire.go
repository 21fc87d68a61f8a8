package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the file in an agent's data dir that a running agent
// holds locked (flock), so that a stop or purge never pulls the sites
// out from under it. The kernel drops the lock when the process dies,
// SIGKILL included.
const lockFile = "agent.lock"

// ErrRunning is returned when an agent process still holds the data dir.
var ErrRunning = errors.New("an agent is running on this data dir")

// lockDataDir takes the data dir for this process, or says which
// process holds it.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent: lock the data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(f.Name())
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s, pid %s): stop it first", ErrRunning, dir, strings.TrimSpace(string(pid)))
		}
		return nil, fmt.Errorf("agent: lock the data dir: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// Stop stops everything of the agent with this data dir once its
// process has ended (SIGTERM leaves sites running for the next start):
// its sites' and MariaDB's containers, a containerd it started, the
// mounts of the sites' disks and network namespaces, the site bridge
// and its nftables tables. Files, databases and host claims stay, and
// the next start brings every site back.
func Stop(ctx context.Context, dataDir string) error {
	return whileStopped(dataDir, func(dir string) error { return StopEverything(ctx, dir) })
}

// whileStopped runs f on the absolute data dir while holding its lock:
// refused while an agent runs there.
func whileStopped(dataDir string, f func(dir string) error) error {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("agent: data dir: %w", err)
	}
	lock, err := lockDataDir(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	return f(dir)
}

// Retire stops everything of the agent with this data dir, gives back
// what it held on the host (site uids, its subnet) and removes the data
// dir: sites, databases and credentials are gone. The node's record and
// certificate are the control plane's (drain it first; revoke it after).
func Retire(ctx context.Context, dataDir, claimsDir string) error {
	return whileStopped(dataDir, func(dir string) error { return retire(ctx, dir, claimsDir) })
}

func retire(ctx context.Context, dir, claimsDir string) error {
	if err := Purge(ctx, dir, claimsDir); err != nil {
		return err
	}
	// Under a long data dir the containerd it started lives in the
	// temporary directory (a unix socket's path is short).
	if ctd := containerdDir(dir); !strings.HasPrefix(ctd, dir+"/") {
		if err := removeTempDir(ctd); err != nil {
			return err
		}
	}
	return RemoveDataDir(dir)
}

// RemoveDataDir removes a data dir in which nothing is mounted any more;
// with a mount left it removes nothing (RemoveAll would empty a site's
// disk through it) and names the mounts.
func RemoveDataDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	// Mount points are named by their real paths.
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if real == "/" {
		return fmt.Errorf("remove %s: refusing to remove the root directory", dir)
	}
	mounts, err := mountsUnder(real)
	if err != nil {
		return err
	}
	// A data dir that is a file system of its own is emptied, and stays;
	// only one an agent made (a mistyped --data-dir naming /home is not).
	own := slices.Contains(mounts, real)
	mounts = slices.DeleteFunc(mounts, func(m string) bool { return m == real })
	if len(mounts) > 0 {
		return fmt.Errorf("remove %s: still mounted under it, so nothing was removed: %s", dir, strings.Join(mounts, ", "))
	}
	if own && !madeByAgent(real) {
		return fmt.Errorf("remove %s: it is a mount point and no agent's data dir (no %s in it or in its agent/), so nothing was removed", dir, namespaceRecord)
	}
	if own {
		ents, err := os.ReadDir(real)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(real, e.Name())); err != nil {
				return fmt.Errorf("remove %s: %w", dir, err)
			}
		}
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// madeByAgent reports whether dir is an agent's data dir, or a dev data
// dir holding one in agent/.
func madeByAgent(dir string) bool {
	for _, p := range []string{filepath.Join(dir, namespaceRecord), filepath.Join(dir, "agent", namespaceRecord)} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// removeTempDir removes the containerd directory an agent keeps in the
// temporary directory, where anyone may create names: only a real
// directory of root's is removed, never what a link leads to.
func removeTempDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != 0 {
		return fmt.Errorf("remove %s: not a directory of root's (a link, or another user's), so nothing was removed", dir)
	}
	return RemoveDataDir(dir)
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// Mount points escape spaces and the like as octal (\040).
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, strings.TrimSuffix(dir, "/")+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
