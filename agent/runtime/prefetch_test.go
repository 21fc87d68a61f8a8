package runtime

import (
	"os"
	"strings"
	"testing"
)

func TestWritableRanges(t *testing.T) {
	maps := `55d0a0000000-55d0a0021000 r--p 00000000 fd:01 1234 /usr/sbin/apache2
55d0a0100000-55d0a0102000 rw-p 00100000 fd:01 1234 /usr/sbin/apache2
55d0a1000000-55d0a1200000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0008000000 rw-s 00000000 00:01 5678 /dev/zero (deleted)
7f0010000000-7f0010001000 r-xp 00000000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00104000 r--p 00000000 00:00 0 [vvar]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
7f0020000000-7f0020001000 rw-p 00000000 00:00 0
garbage line
zz-yy rw-p 0 0 0
7f0030000000-7f0020000000 rw-p 00000000 00:00 0
7f0040000000-7f0041000000 rw-s 00000000 fd:02 4242 /srv/site/tmp/huge.bin
7f0050000000-7f0050100000 rw-s 00000000 00:01 77 /SYSV00000000 (deleted)
7f0060000000-7f0060100000 rw-s 00000000 00:01 78 /memfd:cache (deleted)
7f0070000000-7f0070100000 rw-p 00000000 00:01 79 [anon:php]
`
	got := writableRanges([]byte(maps))
	want := []iovec{
		{0x55d0a1000000, 0x200000},
		{0x7f0000000000, 0x8000000},
		{0x7ffd00000000, 0x21000},
		{0x7f0020000000, 0x1000},
		{0x7f0050000000, 0x100000},
		{0x7f0060000000, 0x100000},
		{0x7f0070000000, 0x100000},
	}
	if len(got) != len(want) {
		t.Fatalf("got %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("range %d: got %x, want %x", i, got[i], want[i])
		}
	}
}

func TestInCgroup(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	own := line[strings.LastIndex(line, ":")+1:]
	if !inCgroup("/proc/self", own) {
		t.Errorf("not in its own cgroup %q", own)
	}
	for _, other := range []string{"/sandboxd-no-such-cgroup", own + "x", ""} {
		if inCgroup("/proc/self", other) && other != own {
			t.Errorf("in %q", other)
		}
	}
	if inCgroup("/proc/0", own) {
		t.Error("a process that is not there is in a cgroup")
	}
}
