package runtime

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Bounds of a prefetch: the container's processes are the tenant's, and
// so is the size of their memory maps.
const (
	maxPrefetchProcs = 64
	maxMapsBytes     = 512 << 10
	maxIovecs        = 1024 // IOV_MAX
)

// Prefetch asks the kernel to read back, ahead of use, what a thawed
// container has in swap: each of its processes' writable anonymous and
// shared memory (never a file's mapping) gets MADV_WILLNEED through
// process_madvise, which brings swapped pages back
// (from zram, on the caller's thread) while the site already serves on
// another core; without it each page comes back when first touched, one
// fault at a time, in the request's own time. Best effort: it reports
// only a container with no cgroup, and reads at most maxPrefetchProcs
// processes and maxMapsBytes of each one's maps.
func (r *Runtime) Prefetch(ctx context.Context, id string) error {
	dir, _ := r.controllerDir(id, "memory")
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		if os.IsNotExist(err) {
			return ErrNoCgroup
		}
		return err
	}
	cgroup := "/" + filepath.Join(r.ns, r.cid(id))
	for _, pid := range pids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		prefetchProcess(pid, cgroup)
	}
	return nil
}

// readPids reads a cgroup.procs file, at most maxPrefetchProcs of it.
func readPids(path string) ([]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(io.LimitReader(f, 16<<10))
	for sc.Scan() && len(pids) < maxPrefetchProcs {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, sc.Err()
}

// inCgroup reports whether the process at /proc/PID dir is in cgroup
// (in any hierarchy: the memory controller's, or the unified one).
func inCgroup(dir, cgroup string) bool {
	b, err := os.ReadFile(dir + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(line, ":"+cgroup) {
			return true
		}
	}
	return false
}

// iovec is struct iovec for addresses in another process.
type iovec struct{ base, len uintptr }

// prefetchProcess advises one process of the container's cgroup (its
// path as /proc/PID/cgroup shows it). The pid was read a while ago and
// may have been reused since: the pidfd pins whatever process has it
// now, which must still be in the cgroup, and must still be alive once
// its maps are read (so they were its own).
func prefetchProcess(pid int, cgroup string) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(pidfd)
	dir := "/proc/" + strconv.Itoa(pid)
	if !inCgroup(dir, cgroup) {
		return
	}
	f, err := os.Open(dir + "/maps")
	if err != nil {
		return
	}
	maps, _ := io.ReadAll(io.LimitReader(f, maxMapsBytes))
	f.Close()
	if unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		return // it exited meanwhile: the maps may be another's
	}
	if len(maps) == maxMapsBytes { // cut by the bound: its last line may be partial
		maps = maps[:bytes.LastIndexByte(maps, '\n')+1]
	}
	iovs := writableRanges(maps)
	for len(iovs) > 0 {
		n := min(len(iovs), maxIovecs)
		// Errors are the advice's own (a range gone since): nothing to do.
		_, _, _ = unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(pidfd), uintptr(unsafe.Pointer(&iovs[0])), uintptr(n),
			unix.MADV_WILLNEED, 0, 0)
		iovs = iovs[n:]
	}
}

// writableRanges picks the writable anonymous mappings of a
// /proc/PID/maps text: heaps, stacks, other private anonymous memory
// (inode 0) and shared memory (opcache's, "/dev/zero (deleted)"; SysV
// and memfd segments), which is what a process has in swap. A mapping
// of a file is left out: advice on it would read the file (the tenant's,
// as large as it likes) into the page cache on the agent's account. The
// names checked lie at the container's root and in its /dev, which a
// site cannot write; the kernel's own ([vvar], [vdso]) are left out.
func writableRanges(maps []byte) []iovec {
	var out []iovec
	for len(maps) > 0 {
		line, rest, ok := bytes.Cut(maps, []byte{'\n'})
		if !ok && len(rest) == 0 && len(maps) >= maxMapsBytes {
			break
		}
		maps = rest
		fields := strings.Fields(string(line))
		if len(fields) < 5 || len(fields[1]) < 2 || fields[1][1] != 'w' {
			continue
		}
		if !anonymous(fields) {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, iovec{uintptr(start), uintptr(end - start)})
	}
	return out
}

// anonymous reports whether a maps line's fields are anonymous memory.
func anonymous(fields []string) bool {
	if len(fields) < 6 {
		return fields[4] == "0" // no name: private anonymous
	}
	name := fields[5]
	switch {
	case name == "[heap]" || name == "[stack]" || strings.HasPrefix(name, "[anon"): // [anon:x], [anon_shmem:x]: named by the process
		return true
	case strings.HasPrefix(name, "["):
		return false // [vvar], [vdso], [vsyscall] and the like
	case name == "/dev/zero" || strings.HasPrefix(name, "/SYSV") || strings.HasPrefix(name, "/memfd:"):
		return true
	}
	return false
}
