package main

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"runtime"

	"github.com/spf13/cobra"
)

func sitesReset(e *env) *cobra.Command {
	var wait bool
	c := &cobra.Command{
		Use: "reset SITE", Short: "Put a site back to what it was made from (same id and URL)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl sites reset site_0123456789 --wait",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			r, err := call(c, "POST", "/api/app/sites/"+url.PathEscape(args[0])+"/reset", nil)
			if err != nil {
				return err
			}
			if wait {
				if err := waitJob(e, c, r.Str("jobId")); err != nil {
					return err
				}
			}
			if e.json {
				return e.printJSON(r)
			}
			fmt.Fprintf(e.stdout, "resetting %s (job %s)\n", args[0], r.Str("jobId"))
			return nil
		},
	}
	c.Flags().BoolVar(&wait, "wait", false, "wait until the site is ready again")
	return c
}

func sitesOpen(e *env) *cobra.Command {
	var print bool
	c := &cobra.Command{
		Use: "open SITE", Short: "Open the site's wp-admin, signed in (a one-time link)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl sites open site_abc\n  sandboxctl sites open site_abc --print   # just the link",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			r, err := call(c, "POST", "/api/sites/"+url.PathEscape(args[0])+"/magic-login", nil)
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(r)
			}
			link := r.Str("url")
			if print || !openBrowser(link) {
				fmt.Fprintln(e.stdout, link)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&print, "print", false, "print the link instead of opening a browser")
	return c
}

// openBrowser opens a URL in the user's browser when there is one.
func openBrowser(u string) bool {
	name := "xdg-open"
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		return exec.Command("rundll32", "url.dll,FileProtocolHandler", u).Start() == nil
	}
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" && runtime.GOOS == "linux" {
		return false
	}
	return exec.Command(name, u).Start() == nil
}
