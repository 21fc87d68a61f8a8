package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() {
	siteCommands = append(siteCommands, sitesDB, sitesSSH, sitesDomain)
}

// sitesIsTerminal reports whether r is a terminal (isTerminal). Tests
// replace it.
var sitesIsTerminal = func(r io.Reader) bool { return isTerminal(r) }

// sitesExec runs a local program on this invocation's streams, with
// extra environment, and waits for it. Ctrl-C belongs to the program
// while it runs (a database shell cancels a query with it): this process
// catches it and lets it pass. Catching, unlike ignoring, leaves the
// program's own disposition at its default. A program that fails is an
// error (exit code 1).
func sitesExec(e *env, path string, args, environ []string) error {
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(), environ...)
	caught := make(chan os.Signal, 1)
	signal.Notify(caught, os.Interrupt)
	defer signal.Stop(caught)
	if err := cmd.Run(); err != nil {
		// Not wrapped: the program's own exit status is not ours (ours
		// are 0, 1, 2 and 130), so its failure is exit 1.
		return fmt.Errorf("%s: %v", path, err)
	}
	return nil
}

func sitesDB(e *env) *cobra.Command {
	var showPassword, shell bool
	c := &cobra.Command{
		Use:   "db SITE",
		Short: "A site's database credentials and Adminer link; --shell runs mysql",
		Long: `db prints the site's database credentials (the password masked unless
--show-password) and a one-time link to Adminer signed in to that database
only. --shell runs the local mysql (or mariadb) client with them; the
host is the one the site's node uses, so that works where it is
reachable (on the node, or with make run on this machine).`,
		Example: "  sandboxctl sites db site_abc\n" +
			"  sandboxctl sites db site_abc --show-password\n" +
			"  sandboxctl sites db site_abc --shell",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if shell && e.json {
				return usageError{errors.New("--shell opens a database shell; it does not take --json")}
			}
			var client string
			if shell {
				for _, name := range []string{"mysql", "mariadb"} {
					if p, err := exec.LookPath(name); err == nil {
						client = p
						break
					}
				}
				if client == "" {
					return errors.New("--shell needs the mysql or mariadb client, and neither is on PATH: install one " +
						"(e.g. apt-get install mariadb-client), or use the Adminer link `sandboxctl sites db " + args[0] + "` prints")
				}
			}
			r, err := e.api("GET", sitesAPI(args[0], "/database"), nil)
			if err != nil {
				return err
			}
			if shell {
				port := sitesNum(r.Get("database.port"))
				// The password travels in the environment, not in the
				// arguments that every user of the machine can list.
				return sitesExec(e, client, []string{"--host", r.Str("database.host"), "--port", port,
					"--user", r.Str("database.user"), r.Str("database.name")}, []string{"MYSQL_PWD=" + r.Str("database.password")})
			}
			return e.reply(r, func(r *apiclient.Response) {
				password := "******** (--show-password shows it)"
				if showPassword {
					password = r.Str("database.password")
				}
				e.fields([][2]string{
					{"host", r.Str("database.host")}, {"port", sitesNum(r.Get("database.port"))}, {"database", r.Str("database.name")},
					{"user", r.Str("database.user")}, {"password", password},
				})
				if u := r.Str("database.adminerUrl"); u != "" {
					fmt.Fprintf(e.stdout, "\nAdminer (works once, expires %s):\n%s\n", ago(r.Get("database.adminerUrlExpiresAt")), u)
				}
			})
		},
	}
	c.Flags().BoolVar(&showPassword, "show-password", false, "print the password instead of masking it")
	c.Flags().BoolVar(&shell, "shell", false, "open the local mysql or mariadb client on the database")
	return c
}

func sitesSSH(e *env) *cobra.Command {
	var print bool
	c := &cobra.Command{
		Use:   "ssh SITE [-- COMMAND...]",
		Short: "SSH into a site, or print how to",
		Long: `ssh runs the local ssh client into the site when stdin is a terminal
(or with a COMMAND, which runs there instead of a shell); otherwise, or
with --print, it prints the host, port, user and commands for ssh and
sftp. The gateway takes the keys you added with sandboxctl ssh-keys.`,
		Example: "  sandboxctl sites ssh site_abc\n" +
			"  sandboxctl sites ssh site_abc -- wp plugin list\n" +
			"  sandboxctl sites ssh site_abc --print",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 1 || (dash < 0 && len(args) > 1) {
				return usageError{errors.New("give the remote command after --: sandboxctl sites ssh SITE -- COMMAND")}
			}
			r, err := e.api("GET", sitesAPI(args[0], "/ssh"), nil)
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(r)
			}
			run := !print && (len(args) > 1 || sitesIsTerminal(e.stdin))
			if run {
				if ssh, err := exec.LookPath("ssh"); err == nil {
					port := sitesNum(r.Get("ssh.port"))
					sshArgs := []string{"-p", port}
					// The API (over its authenticated connection) says which
					// host key the gateway has: pin it rather than trust
					// the first key ssh is shown.
					if kh := r.Str("ssh.knownHosts"); kh != "" {
						file, err := sitesKnownHosts(kh)
						if err != nil {
							return err
						}
						sshArgs = append(sshArgs, "-o", "UserKnownHostsFile="+file, "-o", "StrictHostKeyChecking=yes")
					}
					sshArgs = append(append(sshArgs, r.Str("ssh.username")+"@"+r.Str("ssh.host")), args[1:]...)
					return sitesExec(e, ssh, sshArgs, nil)
				}
				fmt.Fprintln(e.stderr, "sandboxctl: no ssh client on PATH; here is how to connect:")
			}
			e.fields([][2]string{
				{"host", r.Str("ssh.host")}, {"port", sitesNum(r.Get("ssh.port"))}, {"user", r.Str("ssh.username")},
				{"host key", r.Str("ssh.hostKeyFingerprint")},
			})
			fmt.Fprintf(e.stdout, "\n%s\n%s\n", r.Str("ssh.command"), r.Str("ssh.sftpCommand"))
			if kh := r.Str("ssh.knownHosts"); kh != "" {
				fmt.Fprintf(e.stdout, "\nknown_hosts line:\n%s\n", kh)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&print, "print", false, "print how to connect instead of running ssh")
	return c
}

func sitesDomain(e *env) *cobra.Command {
	var remove, check bool
	c := &cobra.Command{
		Use:   "domain SITE [HOSTNAME]",
		Short: "A site's custom domain: show, connect, check DNS, remove",
		Long: `domain SITE shows the site's custom domain and the DNS records it needs.
domain SITE HOSTNAME connects one (its status is pending_dns until the
records exist); --check looks the records up now and, once they are
right, moves WordPress to https://HOSTNAME; --remove disconnects it.`,
		Example: "  sandboxctl sites domain site_abc shop.example.com\n" +
			"  sandboxctl sites domain site_abc --check\n" +
			"  sandboxctl sites domain site_abc --remove",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			for _, b := range []bool{len(args) == 2, remove, check} {
				if b {
					n++
				}
			}
			if n > 1 {
				return usageError{errors.New("give one of HOSTNAME, --check and --remove")}
			}
			method, path, body := "GET", sitesAPI(args[0], "/domain"), any(nil)
			switch {
			case len(args) == 2:
				method, body = "PUT", map[string]string{"hostname": args[1]}
			case check:
				method, path = "POST", path+"/check"
			case remove:
				method = "DELETE"
			}
			return e.send(method, path, body, func(r *apiclient.Response) {
				d, _ := r.Get("domain").(map[string]any)
				switch {
				case d == nil:
					fmt.Fprintf(e.stdout, "%s has no custom domain; connect one with\n  sandboxctl sites domain %s HOSTNAME\n", args[0], args[0])
				case remove:
					fmt.Fprintf(e.stdout, "removed %s from %s", str(d["hostname"]), args[0])
					if job := r.Str("jobId"); job != "" {
						fmt.Fprintf(e.stdout, "; WordPress moves back to its sandbox URL (job %s)", job)
					}
					fmt.Fprintln(e.stdout)
				default:
					sitesPrintDomain(e, d, r)
				}
			})
		},
	}
	c.Flags().BoolVar(&check, "check", false, "look the DNS records up now (once right, WordPress moves)")
	c.Flags().BoolVar(&remove, "remove", false, "disconnect the custom domain")
	return c
}

// sitesPrintDomain prints a domain's state and the records to make: a
// table when it fits in 80 columns, else one block per record (DNS
// values are copied by hand, so they are never cut).
func sitesPrintDomain(e *env, d map[string]any, r *apiclient.Response) {
	fmt.Fprintf(e.stdout, "%s: %s", str(d["hostname"]), str(d["status"]))
	if d["lastCheckedAt"] != nil {
		fmt.Fprintf(e.stdout, " (checked %s)", ago(d["lastCheckedAt"]))
	}
	fmt.Fprintln(e.stdout)
	if le, _ := d["lastError"].(string); le != "" {
		fmt.Fprintf(e.stdout, "last check: %s\n", le)
	}
	if job := r.Str("jobId"); job != "" {
		fmt.Fprintf(e.stdout, "moving WordPress to %s (job %s)\n", str(d["url"]), job)
	}
	if d["status"] == "active" {
		fmt.Fprintf(e.stdout, "served at %s\n", str(d["url"]))
	}
	records, _ := d["records"].([]any)
	if len(records) == 0 {
		return
	}
	fmt.Fprintln(e.stdout, "\nDNS records to create at your provider:")
	header := []string{"TYPE", "NAME", "VALUE"}
	widths := []int{len(header[0]), len(header[1]), len(header[2])}
	rows := make([][]string, 0, len(records))
	for _, x := range records {
		rec, _ := x.(map[string]any)
		row := []string{str(rec["type"]), str(rec["name"]), str(rec["value"])}
		for i, v := range row {
			widths[i] = max(widths[i], len(v))
		}
		rows = append(rows, row)
	}
	if widths[0]+widths[1]+widths[2]+2*2 <= 80 {
		e.table(header, rows)
		return
	}
	for i, row := range rows {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		fmt.Fprintf(e.stdout, "type:  %s\nname:  %s\nvalue: %s\n", row[0], row[1], row[2])
	}
}

// sitesKnownHosts keeps the gateways' host keys the API vouched for in a
// known_hosts file of sandboxctl's own, next to its config, and returns
// its path.
func sitesKnownHosts(line string) (string, error) {
	cfg, err := configPath()
	if err != nil {
		return "", err
	}
	file := filepath.Join(filepath.Dir(cfg), "known_hosts")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return "", fmt.Errorf("known hosts: %w", err)
	}
	have, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("known hosts: %w", err)
	}
	f := strings.Fields(line)
	if len(f) < 3 || strings.ContainsAny(line, "\r\n") {
		return "", fmt.Errorf("the API's known_hosts line %q is not one", line)
	}
	var keep []string
	host := f[0]
	for _, l := range strings.Split(string(have), "\n") {
		if l == line {
			return file, nil
		}
		// A gateway whose key changed (the API says so) replaces its line.
		if f := strings.Fields(l); len(f) > 0 && f[0] != host {
			keep = append(keep, l)
		}
	}
	keep = append(keep, line)
	if err := writePrivate(file, []byte(strings.Join(keep, "\n")+"\n")); err != nil {
		return "", fmt.Errorf("known hosts: %w", err)
	}
	return file, nil
}
