package sitenet

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// nsfsMagic is the filesystem type of a mounted namespace file.
const nsfsMagic = 0x6e736673

// createNetNS makes a new network namespace and pins it by bind-mounting
// it at path, so it lives without a process in it.
func createNetNS(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("netns file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread goes back to its namespace when done, and is only then
		// released. A thread that cannot go back stays locked, so Go ends it
		// with this goroutine; but Go never ends the process's main thread
		// (it parks it instead), which would leave the process listed in the
		// site's namespace in /proc/<pid>/net: going back avoids that too.
		runtime.LockOSThread()
		origin, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("open this thread's netns: %w", err)
			return
		}
		defer origin.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
		pinErr := unix.Mount(src, path, "none", unix.MS_BIND, "")
		// Home first, answer after: the caller may look at every thread
		// as soon as it has the answer.
		if err := unix.Setns(int(origin.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("back to the agent's netns: %w", err)
			return
		}
		runtime.UnlockOSThread()
		if pinErr != nil {
			errc <- fmt.Errorf("pin netns: %w", pinErr)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		_ = removeNetNS(path)
		return err
	}
	return nil
}

// isNetNS reports whether path is a pinned namespace (after a reboot the
// file stays but the mount is gone).
func isNetNS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == nsfsMagic
}

// removeNetNS unpins and deletes the namespace file; missing is fine.
func removeNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unpin netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
