package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

// sitesReset is `sites reset`: a site put back to what it was made
// from, keeping its id and URL.
func sitesReset(e *env) *cobra.Command {
	return sitesJobCmd(e, &cobra.Command{
		Use: "reset SITE", Short: "Put a site back to what it was made from (same id and URL)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl sites reset site_0123456789 --wait",
	}, "POST", "/reset", "resetting", "wait until the site is ready again")
}

// sitesOpen is `sites open`: a one-time wp-admin login link, opened in
// the browser when there is one.
func sitesOpen(e *env) *cobra.Command {
	var print bool
	c := &cobra.Command{
		Use: "open SITE", Short: "Open the site's wp-admin, signed in (a one-time link)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl sites open site_abc\n  sandboxctl sites open site_abc --print   # just the link",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("POST", apiPath("/api/sites", args[0], "magic-login"), nil, func(r *apiclient.Response) {
				if link := r.Str("url"); print || !openBrowser(link) {
					fmt.Fprintln(e.stdout, link)
				}
			})
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
