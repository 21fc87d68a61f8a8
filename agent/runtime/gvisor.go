package runtime

import (
	"fmt"
	"os"
	"strings"
)

// runcShim is containerd's runc v2 shim. It drives gVisor too: its runc
// options name the runsc wrapper as the binary, so no
// containerd-shim-runsc-v1 is needed.
const runcShim = "io.containerd.runc.v2"

// runcRoot is where the runc shim keeps a runtime's state, per namespace.
const runcRoot = "/run/containerd/runc"

// RunscFlags are the runsc flags a site container needs on a host without
// usable KVM:
//   - the ptrace platform (KVM hangs on these machines);
//   - host networking, which with the site's namespace in the spec means
//     the sandbox's sockets are kernel sockets in that namespace, under the
//     node's nftables policy as with runc. Debian's runsc (2022-12-19)
//     refuses its own network stack on kernels where every namespace has
//     /proc/sys/net/core/rmem_default ("cannot run with network enabled in
//     root network namespace"). A gVisor container must have a NetNS, or
//     this would be the node's network: Run refuses one without;
//   - connects to host Unix sockets (the MariaDB socket).
//
// Not --oci-seccomp: that runsc mistranslates containerd's default profile
// (it denies pselect6, which PHP needs); the sentry is the syscall filter.
var RunscFlags = []string{"--platform=ptrace", "--network=host", "--host-uds=open"}

// GVisorPids is what a gVisor sandbox adds to a container's process
// count: the sentry's, gofer's and ptrace stubs' threads count against
// pids.max (112 to 173 measured idle).
const GVisorPids = 256

// WriteRunscWrapper writes an executable at path that runs runsc with
// RunscFlags in front of the runc command line the shim passes.
func WriteRunscWrapper(path, runsc string) error {
	q := make([]string, 0, len(RunscFlags)+1)
	for _, f := range append([]string{runsc}, RunscFlags...) {
		q = append(q, "'"+strings.ReplaceAll(f, "'", `'\''`)+"'")
	}
	script := fmt.Sprintf("#!/bin/sh\n# Written by the sandbox agent: sites run under gVisor.\nexec %s \"$@\"\n", strings.Join(q, " "))
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
