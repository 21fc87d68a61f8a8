package runtime

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// killSession SIGKILLs the process pid (a host pid) and every process
// that belongs to it: the members of its session when it leads one (runc
// makes an exec a session leader, with or without a terminal), else its
// descendants. Only processes in a pid namespace other than the agent's
// are touched, and only in pid's own when it still runs: under gVisor the
// pid is a runsc helper on the host, which is left to the runtime's kill.
// They are stopped first, round after round until no new one appears, so
// none can fork out of reach between the scan and the kill.
func killSession(pid int) error {
	own, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return fmt.Errorf("own pid namespace: %w", err)
	}
	// A session id stays reserved while any member lives, so once the
	// leader has exited its session is still exactly its former members.
	leader, ns := true, ""
	if self, err := readStat(pid); err == nil {
		leader = self.session == pid
		if ns, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil {
			return fmt.Errorf("pid namespace of %d: %w", pid, err)
		}
		if ns == own {
			return fmt.Errorf("process %d is not in a container", pid)
		}
	} else if !errors.Is(err, syscall.ESRCH) {
		return err
	}
	stopped := map[int]bool{}
	if ns != "" {
		stopped[pid] = true
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	for round := 0; round < 50; round++ {
		found := false
		all, err := scanStats()
		if err != nil {
			break
		}
		for _, st := range all {
			if stopped[st.pid] {
				continue
			}
			member := leader && st.session == pid || !leader && stopped[st.ppid]
			if !member {
				continue
			}
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", st.pid))
			if err != nil || l == own || ns != "" && l != ns {
				continue
			}
			stopped[st.pid] = true
			found = true
			_ = syscall.Kill(st.pid, syscall.SIGSTOP)
		}
		if !found {
			break
		}
	}
	for p := range stopped {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return nil
}

type procStat struct {
	pid, ppid, session int
}

// readStat parses /proc/PID/stat: "pid (comm) state ppid pgrp session …",
// where comm may hold spaces and parentheses.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if os.IsNotExist(err) {
			return procStat{}, syscall.ESRCH
		}
		return procStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	ppid, err1 := strconv.Atoi(f[1])
	sid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return procStat{pid: pid, ppid: ppid, session: sid}, nil
}

func scanStats() ([]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]procStat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}
