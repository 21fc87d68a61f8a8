package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// unit is a parsed systemd unit file: section → key → values in order
// (a key may repeat), and its comment text.
type unit struct {
	keys     map[string]map[string][]string
	comments string
}

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{keys: map[string]map[string][]string{}}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			u.comments += line + "\n"
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u.keys[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, "\\") {
				t.Fatalf("%s:%d: not a key=value line of a section: %q", path, n, line)
			}
			u.keys[section][strings.TrimSpace(k)] = append(u.keys[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// service returns the last value of a [Service] key and whether it is set.
func (u unit) service(key string) (string, bool) {
	v := u.keys["Service"][key]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// secretOnCommandLine finds what must never be in ExecStart (any local
// user reads it in /proc): a token, password or key, or a flag taking one.
var secretOnCommandLine = regexp.MustCompile(`(?i)sbxc_|--cluster-token|password|secret|access[-_]key|SANDBOXD_CLUSTER_TOKEN`)

// mountNamespacing are the directives that give a service its own mount
// namespace, which cuts mount propagation to the host (systemd.exec(5)).
var mountNamespacing = []string{"ProtectSystem", "ReadWritePaths", "ProtectHome", "PrivateTmp", "PrivateDevices",
	"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectProc", "ProtectHostname"}

// TestSystemdUnits checks each unit's hardening: the settings every unit
// has, the sandboxing of the server and the edge, and the agent's
// documented exceptions (it must mount for containerd and make network
// namespaces).
func TestSystemdUnits(t *testing.T) {
	tests := []struct {
		file    string
		dataDir string // "" when the unit may not confine its writes
		user    string
		caps    string // the bounding set, exactly
		ambient string
		absent  []string
	}{
		{file: "sandboxd-server.service", dataDir: "/var/lib/sandboxd/server", user: "sandboxd", caps: "", ambient: ""},
		{file: "sandboxd-edge.service", dataDir: "/var/lib/sandboxd/edge", user: "sandboxd-edge",
			caps: "CAP_NET_BIND_SERVICE", ambient: "CAP_NET_BIND_SERVICE"},
		{file: "sandboxd-agent.service", user: "root",
			caps:    "CAP_SYS_ADMIN CAP_NET_ADMIN CAP_SYS_CHROOT CAP_SETUID CAP_SETGID CAP_CHOWN CAP_FOWNER CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_KILL CAP_NET_BIND_SERVICE",
			ambient: "", absent: append([]string{"RestrictNamespaces", "MemoryDenyWriteExecute"}, mountNamespacing...)},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			u := parseUnit(t, filepath.Join("systemd", tt.file))
			want := map[string]string{"NoNewPrivileges": "yes", "Restart": "on-failure", "User": tt.user,
				"CapabilityBoundingSet": tt.caps, "AmbientCapabilities": tt.ambient, "RestrictSUIDSGID": "yes",
				"SystemCallArchitectures": "native", "SystemCallErrorNumber": "EPERM"}
			if tt.dataDir != "" {
				for k, v := range map[string]string{"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
					"ReadWritePaths": tt.dataDir, "ProtectKernelModules": "yes", "RestrictNamespaces": "yes",
					"ProtectControlGroups": "yes", "PrivateDevices": "yes"} {
					want[k] = v
				}
			}
			for k, v := range want {
				if got, ok := u.service(k); !ok || got != v {
					t.Errorf("%s=%q (set %v), want %q", k, got, ok, v)
				}
			}
			for _, k := range tt.absent {
				if v, ok := u.service(k); ok {
					t.Errorf("%s=%s must not be set in this unit", k, v)
				}
			}
			execStart, _ := u.service("ExecStart")
			if !strings.HasPrefix(execStart, "/usr/local/bin/sandboxd ") {
				t.Errorf("ExecStart=%s", execStart)
			}
			if m := secretOnCommandLine.FindString(execStart); m != "" {
				t.Errorf("ExecStart carries a secret (%s): pass it with EnvironmentFile= or LoadCredential=", m)
			}
			if tt.dataDir != "" && !strings.Contains(execStart, "--data-dir "+tt.dataDir) {
				t.Errorf("ExecStart does not use the writable data dir %s: %s", tt.dataDir, execStart)
			}
			if _, env := u.service("EnvironmentFile"); !env {
				if _, cred := u.service("LoadCredential"); !cred {
					t.Error("no EnvironmentFile= or LoadCredential= for the join token and keys")
				}
			}
			if filters := u.keys["Service"]["SystemCallFilter"]; len(filters) == 0 ||
				!strings.Contains(strings.Join(filters, " "), "@module") && !strings.Contains(strings.Join(filters, " "), "@system-service") {
				t.Errorf("SystemCallFilter=%q allows loading modules", filters)
			}
			if got := u.keys["Install"]["WantedBy"]; len(got) != 1 || got[0] != "multi-user.target" {
				t.Errorf("WantedBy=%q", got)
			}
			// Every capability kept is explained in the unit's comments.
			for _, c := range strings.Fields(tt.caps) {
				if !strings.Contains(u.comments, c) {
					t.Errorf("%s is kept without a comment saying why", c)
				}
			}
			if strings.Contains(tt.caps, "CAP_SYS_MODULE") {
				t.Error("CAP_SYS_MODULE kept")
			}
		})
	}
}

// TestSystemdVerify runs systemd-analyze verify on the units (with the
// binary's path replaced by one that exists on this machine) and checks
// the exposure score systemd-analyze security gives the sandboxed ones.
// A machine without systemd-analyze fails it: install-deps.sh installs it.
func TestSystemdVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is not installed (deploy/dev/install-deps.sh installs it): %v", err)
	}
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var units []string
	for _, name := range []string{"sandboxd-server.service", "sandboxd-agent.service", "sandboxd-edge.service"} {
		b, err := os.ReadFile(filepath.Join("systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/sandboxd", trueBin)), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, p)
	}
	cmd := exec.Command(analyze, append([]string{"verify"}, units...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Exposure out of 10 (lower is better), as systemd-analyze rates it.
	limits := map[string]float64{"sandboxd-server.service": 2, "sandboxd-edge.service": 2, "sandboxd-agent.service": 7}
	score := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)
	for _, p := range units {
		out, err := exec.Command(analyze, "security", "--offline=yes", "--no-pager", p).CombinedOutput()
		if err != nil {
			t.Fatalf("systemd-analyze security %s: %v\n%s", p, err, out)
		}
		m := score.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("no exposure level in:\n%s", out)
		}
		level, _ := strconv.ParseFloat(m[1], 64)
		if limit := limits[filepath.Base(p)]; level > limit {
			t.Errorf("%s: exposure %.1f, above %.1f", filepath.Base(p), level, limit)
		}
	}
}
