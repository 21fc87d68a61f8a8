//go:build unix

package main

import "syscall"

// oNoFollow makes an open fail on a symlink.
const oNoFollow = syscall.O_NOFOLLOW
