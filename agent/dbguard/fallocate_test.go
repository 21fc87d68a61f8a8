package dbguard_test

import (
	"os"

	"golang.org/x/sys/unix"
)

func syscallFallocate(f *os.File, n int64) error { return unix.Fallocate(int(f.Fd()), 0, 0, n) }
