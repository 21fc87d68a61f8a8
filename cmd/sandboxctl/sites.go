package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func sitesCmd(e *env) *cobra.Command {
	c := group("sites", "Sites: make, inspect, change and remove them", "",
		sitesList(e), sitesGet(e), sitesCreate(e), sitesDelete(e), sitesReset(e), sitesOpen(e))
	for _, f := range siteCommands {
		c.AddCommand(f(e))
	}
	// Every subcommand whose first argument is a site completes it.
	var walk func(*cobra.Command)
	walk = func(parent *cobra.Command) {
		for _, sub := range parent.Commands() {
			if f := strings.Fields(sub.Use); len(f) > 1 && f[1] == "SITE" && sub.ValidArgsFunction == nil {
				sub.ValidArgsFunction = completeSites(e)
			}
			walk(sub)
		}
	}
	walk(c)
	return c
}

func sitesList(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "The workspace's sites", Args: cobra.NoArgs,
		Example: "  sandboxctl sites list\n  sandboxctl sites list --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", "/api/app/sites", nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, s := range r.List("sites") {
					rows = append(rows, []string{str(s["id"]), str(s["name"]), str(s["status"]), str(s["url"]), str(s["phpVersion"]), ago(s["createdAt"])})
				}
				e.table([]string{"ID", "NAME", "STATUS", "URL", "PHP", "CREATED"}, rows)
			})
		},
	}
}

func sitesGet(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "get SITE", Short: "One site", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl sites get site_0123456789\n  sandboxctl sites get site_0123456789 --json | jq -r .site.url",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("GET", sitesAPI(args[0], ""), nil, func(r *apiclient.Response) { printSite(e, r) })
		},
	}
}

// printSite shows the site of a {site} answer.
func printSite(e *env, r *apiclient.Response) {
	e.fields([][2]string{
		{"id", r.Str("site.id")}, {"name", r.Str("site.name")}, {"status", r.Str("site.status")}, {"url", r.Str("site.url")},
		{"php", r.Str("site.phpVersion")}, {"wordpress", r.Str("site.wordpressVersion")}, {"created", ago(r.Get("site.createdAt"))},
	})
}

func sitesCreate(e *env) *cobra.Command {
	var name, php, template string
	var expires int
	var wait bool
	c := &cobra.Command{
		Use: "create", Short: "Make a site (202: its job runs on)", Args: cobra.NoArgs,
		Example: "  sandboxctl sites create --name demo --wait\n  sandboxctl sites create --php 7.4 --expires 60 --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := map[string]any{}
			if name != "" {
				body["name"] = name
			}
			if php != "" {
				body["phpVersion"] = php
			}
			if template != "" {
				body["templateId"] = template
			}
			if expires > 0 {
				body["expiresInMinutes"] = expires
			}
			c, r, err := e.request("POST", "/api/app/sites", body, "Idempotency-Key", e.idempotencyKey())
			if err != nil {
				return err
			}
			if r, err = e.afterJob(c, r, wait, "", sitesAPI(r.Str("site.id"), "")); err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) { printSite(e, r) })
		},
	}
	c.Flags().StringVar(&name, "name", "", "site name")
	c.Flags().StringVar(&php, "php", "", "PHP version (default: the server's)")
	c.Flags().StringVar(&template, "template", "", "template id to make it from")
	c.Flags().IntVar(&expires, "expires", 0, "minutes until the site is deleted (0: never)")
	c.Flags().BoolVar(&wait, "wait", false, "wait until the site is ready (or its job failed)")
	return c
}

// sitesDelete is `sites delete`.
func sitesDelete(e *env) *cobra.Command {
	return sitesJobCmd(e, &cobra.Command{
		Use: "delete SITE", Short: "Delete a site", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl sites delete site_0123456789\n  sandboxctl sites delete site_0123456789 --wait",
	}, "DELETE", "", "deleting", "wait until the site is gone")
}

// sitesJobCmd completes c, a command whose one request about the site
// SITE (rest appended to its path) starts a job: --wait (waitHelp) waits
// for the job; a person is told "doing SITE (job ID)".
func sitesJobCmd(e *env, c *cobra.Command, method, rest, doing, waitHelp string) *cobra.Command {
	var wait bool
	c.RunE = func(cmd *cobra.Command, args []string) error {
		var header []string
		if method == "POST" { // a reset: safe to retry under one key
			header = []string{"Idempotency-Key", e.idempotencyKey()}
		}
		r, err := e.startJob(wait, method, sitesAPI(args[0], rest), nil, header...)
		if err != nil {
			return err
		}
		return e.reply(r, func(r *apiclient.Response) { fmt.Fprintf(e.stdout, "%s %s (job %s)\n", doing, args[0], r.Str("jobId")) })
	}
	c.Flags().BoolVar(&wait, "wait", false, waitHelp)
	return c
}

// waitLimit bounds how long --wait follows one job.
const waitLimit = 30 * time.Minute

// waitJob polls a job until it ends; a failed job is an API error. On a
// terminal each change of the job's status is shown on stderr.
func waitJob(e *env, c *apiclient.Client, id string) error {
	deadline := time.Now().Add(waitLimit)
	last := ""
	for {
		r, err := call(c, "GET", apiPath("/api/app/jobs", id), nil)
		if err != nil {
			return err
		}
		status := r.Str("job.status")
		if status != last && isTerminal(e.stderr) {
			fmt.Fprintf(e.stderr, "job %s: %s\n", id, status)
		}
		last = status
		switch status {
		case "succeeded":
			return nil
		case "failed":
			return &apiclient.Error{Status: 200, Code: r.Str("job.error.code"), Message: r.Str("job.error.message")}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s is still %s after %s: follow it with GET /api/app/jobs/%s", id, status, waitLimit, id)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// completeSites offers the workspace's site ids (with their names) when
// the shell completes a SITE argument.
func completeSites(e *env) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		e.noRetry = true
		r, err := e.api("GET", "/api/app/sites", nil)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, s := range r.List("sites") {
			out = append(out, str(s["id"])+"\t"+str(s["name"]))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
