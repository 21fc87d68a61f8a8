package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

// This file holds the `sites` subcommands that change what a site runs
// (restore, php, plugins) and the helpers the other sites_*.go files
// share; every helper's name starts with "sites" so the families added
// by other files cannot collide with it.

func init() {
	siteCommands = append(siteCommands, sitesRestore, sitesPHP, sitesPlugins)
}

// sitesAPI is the path of one of a site's resources: rest is appended to
// /api/app/sites/{id}, the id escaped.
func sitesAPI(site, rest string) string { return apiPath("/api/app/sites", site) + rest }

// sitesPrintValue prints v, made of objects the API sent, as --json does.
func sitesPrintValue(e *env, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the answer: %w", err)
	}
	return e.printJSON(&apiclient.Response{Raw: raw})
}

// sitesNum is a JSON number as a person reads it: 12000000, not the
// 1.2e+07 that fmt makes of a float64.
func sitesNum(v any) string {
	if f, ok := v.(float64); ok && f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10)
	}
	return str(v)
}

// sitesYesNo is a boolean as a table shows it.
func sitesYesNo(v any) string {
	if b, _ := v.(bool); b {
		return "yes"
	}
	return "no"
}

func sitesRestore(e *env) *cobra.Command {
	var template string
	var wait bool
	c := &cobra.Command{
		Use:   "restore SITE --template TEMPLATE",
		Short: "Replace a site's content with a template's (same id and URL)",
		Long: `restore replaces a ready site's content (files and database) with a ready
template's, keeping the site's id and URL. The site is made from that
template afterwards: a later reset goes back to it.`,
		Example: "  sandboxctl sites restore site_abc --template tpl_xyz --wait\n" +
			"  sandboxctl sites restore site_abc --template tpl_xyz --json | jq -r .jobId",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := e.request("POST", sitesAPI(args[0], "/restore"), map[string]string{"templateId": template},
				"Idempotency-Key", e.idempotencyKey())
			if err != nil {
				return err
			}
			if r, err = e.afterJob(c, r, wait, "", sitesAPI(args[0], "")); err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) {
				if wait {
					printSite(e, r)
					return
				}
				fmt.Fprintf(e.stdout, "restoring %s from %s (job %s)\n", args[0], template, r.Str("jobId"))
			})
		},
	}
	c.Flags().StringVar(&template, "template", "", "the template whose content the site takes (required)")
	c.Flags().BoolVar(&wait, "wait", false, "wait until the site is ready again")
	_ = c.MarkFlagRequired("template")
	return c
}

func sitesPHP(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "php SITE",
		Short: "A site's PHP: its version and php.ini settings",
		Long: `php SITE shows the site's PHP version and the php.ini settings in effect.
With --json it prints the API's two objects, site and phpConfig, side by
side in one object, each as the API sent it.`,
		Example: "  sandboxctl sites php site_abc\n" +
			"  sandboxctl sites php set-version site_abc 8.4 --wait\n" +
			"  sandboxctl sites php config site_abc memory_limit=512M max_execution_time=120",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, site, err := e.request("GET", sitesAPI(args[0], ""), nil)
			if err != nil {
				return err
			}
			cfg, err := call(c, "GET", sitesAPI(args[0], "/php-config"), nil)
			if err != nil {
				return err
			}
			if e.json {
				both := map[string]any{}
				for k, v := range site.Body {
					both[k] = v
				}
				for k, v := range cfg.Body {
					both[k] = v
				}
				return sitesPrintValue(e, both)
			}
			fmt.Fprintf(e.stdout, "PHP %s\n\n", site.Str("site.phpVersion"))
			sitesPrintSettings(e, cfg.Get("phpConfig.settings"))
			return nil
		},
	}
	c.AddCommand(sitesPHPVersion(e), sitesPHPConfig(e))
	return c
}

// sitesPrintSettings prints php.ini settings sorted by name.
func sitesPrintSettings(e *env, v any) {
	m, _ := v.(map[string]any)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	rows := make([][]string, 0, len(names))
	for _, k := range names {
		rows = append(rows, []string{k, clip(str(m[k]), 50)})
	}
	e.table([]string{"SETTING", "VALUE"}, rows)
}

func sitesPHPVersion(e *env) *cobra.Command {
	var wait bool
	c := &cobra.Command{
		Use:   "set-version SITE VERSION",
		Short: "Switch a site to another PHP version (8.5 8.4 8.3 8.2 8.1 7.4)",
		Long: `set-version starts a job that moves the site to another PHP runtime. The
site's version changes only once WordPress answers on the new one;
otherwise the job fails and the site keeps serving on its version.`,
		Example: "  sandboxctl sites php set-version site_abc 8.4\n  sandboxctl sites php set-version site_abc 7.4 --wait",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := e.startJob(wait, "PUT", sitesAPI(args[0], "/php-version"), map[string]string{"phpVersion": args[1]})
			if err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) {
				if wait {
					fmt.Fprintf(e.stdout, "%s runs PHP %s\n", args[0], r.Str("phpVersion"))
					return
				}
				fmt.Fprintf(e.stdout, "switching %s to PHP %s (job %s)\n", args[0], r.Str("phpVersion"), r.Str("jobId"))
			})
		},
	}
	c.Flags().BoolVar(&wait, "wait", false, "wait until the site runs the new version (or the job failed)")
	return c
}

func sitesPHPConfig(e *env) *cobra.Command {
	var wait bool
	c := &cobra.Command{
		Use:   "config SITE [KEY=VALUE...]",
		Short: "Show or change a site's php.ini settings",
		Long: `config SITE shows the php.ini settings in effect. With KEY=VALUE pairs it
changes them (memory_limit, upload_max_filesize, post_max_size,
max_execution_time, max_input_time, max_input_vars, display_errors): a job
applies them without taking the site down.`,
		Example: "  sandboxctl sites php config site_abc\n" +
			"  sandboxctl sites php config site_abc memory_limit=512M --wait",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			settings := map[string]string{}
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("%q is not KEY=VALUE", kv)}
				}
				settings[k] = v
			}
			if len(settings) == 0 {
				return e.send("GET", sitesAPI(args[0], "/php-config"), nil, func(r *apiclient.Response) {
					sitesPrintSettings(e, r.Get("phpConfig.settings"))
				})
			}
			r, err := e.startJob(wait, "PUT", sitesAPI(args[0], "/php-config"), map[string]any{"settings": settings})
			if err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) {
				if wait {
					fmt.Fprintf(e.stdout, "php.ini of %s changed\n\n", args[0])
				} else {
					fmt.Fprintf(e.stdout, "changing php.ini of %s (job %s)\n\n", args[0], r.Str("jobId"))
				}
				sitesPrintSettings(e, r.Get("phpConfig.settings"))
			})
		},
	}
	c.Flags().BoolVar(&wait, "wait", false, "wait until the settings apply (or the job failed)")
	return c
}

func sitesPlugins(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:     "plugins SITE",
		Short:   "Plugins and themes installed in a site",
		Example: "  sandboxctl sites plugins site_abc\n  sandboxctl sites plugins add site_abc woocommerce --activate --wait",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("GET", sitesAPI(args[0], "/plugins"), nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, p := range r.List("plugins") {
					rows = append(rows, []string{clip(str(p["slug"]), 28), clip(str(p["version"]), 10), str(p["kind"]),
						sitesYesNo(p["active"]), clip(str(p["name"]), 20)})
				}
				e.table([]string{"SLUG", "VERSION", "KIND", "ACTIVE", "NAME"}, rows)
			})
		},
	}
	c.AddCommand(sitesPluginAdd(e))
	return c
}

func sitesPluginAdd(e *env) *cobra.Command {
	var zipURL string
	var activate, wait bool
	c := &cobra.Command{
		Use:   "add SITE [LIBRARY-ENTRY]",
		Short: "Deploy a Library plugin or theme (or a ZIP URL) to a site",
		Long: `add deploys a Library entry (its slug or id) to the site, or with --zip-url
a ZIP the job downloads. It replaces an installed copy of the same
directory.`,
		Example: "  sandboxctl sites plugins add site_abc my-plugin --activate --wait\n" +
			"  sandboxctl sites plugins add site_abc --zip-url https://example.com/plugin.zip",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			switch {
			case len(args) == 2 && zipURL != "":
				return usageError{errors.New("give a LIBRARY-ENTRY or --zip-url, not both")}
			case len(args) == 2:
				body["libraryPlugin"] = args[1]
			case zipURL != "":
				body["zipUrl"] = zipURL
			default:
				return usageError{errors.New("give a LIBRARY-ENTRY (slug or id) or --zip-url")}
			}
			if activate {
				body["activate"] = true
			}
			r, err := e.startJob(wait, "POST", sitesAPI(args[0], "/plugins"), body, "Idempotency-Key", e.idempotencyKey())
			if err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) {
				if wait {
					fmt.Fprintf(e.stdout, "deployed to %s\n", args[0])
					return
				}
				fmt.Fprintf(e.stdout, "deploying to %s (job %s)\n", args[0], r.Str("jobId"))
			})
		},
	}
	c.Flags().StringVar(&zipURL, "zip-url", "", "deploy the ZIP at this http(s) URL instead")
	c.Flags().BoolVar(&activate, "activate", false, "activate it once installed")
	c.Flags().BoolVar(&wait, "wait", false, "wait until it is deployed (or the job failed)")
	return c
}
