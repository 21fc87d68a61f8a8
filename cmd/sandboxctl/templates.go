package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, templatesCmd) }

func templatesCmd(e *env) *cobra.Command {
	return group("templates", "Templates: frozen sites that new sites are made from",
		`  sandboxctl templates create site_abc --name "Shop demo" --wait
  sandboxctl templates list
  sandboxctl templates launch tpl_abc --wait`,
		tplList(e), tplGet(e), tplCreate(e), tplUpdate(e), tplDelete(e), tplLeads(e), tplLaunch(e))
}

const tplPath = "/api/app/templates"

func tplList(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "The workspace's templates", Args: cobra.NoArgs,
		Example: "  sandboxctl templates list\n  sandboxctl templates list --json | jq -r '.templates[].id'",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", tplPath, nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, t := range r.List("templates") {
					rows = append(rows, []string{str(t["id"]), wsctlText(t["name"], 20), str(t["status"]), str(t["phpVersion"]),
						wsctlOnOff(t["launchEnabled"]), ago(t["createdAt"])})
				}
				e.table([]string{"ID", "NAME", "STATUS", "PHP", "LAUNCH", "CREATED"}, rows)
			})
		},
	}
}

func tplGet(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "get TEMPLATE", Short: "One template", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl templates get tpl_abc\n  sandboxctl templates get tpl_abc --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			return tplSend(e, "GET", args[0], nil, tplPrint)
		},
	}
}

// tplSend sends one request about a template and prints the {template}
// answer with show, which gets the client too (for the launch URL).
func tplSend(e *env, method, template string, body any, show func(*env, *apiclient.Client, *apiclient.Response)) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	return e.sendWith(c, method, apiPath(tplPath, template), body, func(r *apiclient.Response) { show(e, c, r) })
}

// tplPrint shows the template of a {template} answer.
func tplPrint(e *env, c *apiclient.Client, r *apiclient.Response) {
	rows := [][2]string{
		{"id", r.Str("template.id")}, {"name", wsctlText(r.Get("template.name"), 60)},
		{"description", wsctlText(r.Get("template.description"), 60)}, {"status", r.Str("template.status")},
	}
	if f := r.Str("template.failureReason"); f != "" {
		rows = append(rows, [2]string{"failure", clip(f, 60)})
	}
	rows = append(rows, [][2]string{
		{"source site", wsctlText(r.Get("template.sourceSiteId"), 60)}, {"php", r.Str("template.phpVersion")},
		{"wordpress", r.Str("template.wordpressVersion")}, {"size", jsonByteSize(r.Get("template.sizeBytes"))},
		{"warm pool", str(r.Get("template.warmPoolSize"))}, {"launch link", wsctlOnOff(r.Get("template.launchEnabled"))},
	}...)
	if u := launchURL(c, r); u != "" {
		rows = append(rows, [2]string{"launch url", u})
	}
	rows = append(rows, [2]string{"created", ago(r.Get("template.createdAt"))})
	e.fields(rows)
}

func tplCreate(e *env) *cobra.Command {
	var name, description string
	var wait bool
	cmd := &cobra.Command{
		Use:   "create SITE --name NAME",
		Short: "Freeze a ready site into a template (its files and database)",
		Long: `Freeze a ready site into a template. The site is stopped for a moment
while its files and database are copied; the template is "building" until
its job ends (--wait waits for it).`,
		Args: cobra.ExactArgs(1),
		Example: `  sandboxctl templates create site_abc --name "Shop demo" --wait
  sandboxctl templates create site_abc --name shop --description "20 products"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"siteId": args[0], "name": name}
			if description != "" {
				body["description"] = description
			}
			c, r, err := e.request("POST", tplPath, body, "Idempotency-Key", e.idempotencyKey())
			if err != nil {
				return err
			}
			id := r.Str("template.id")
			if r, err = e.afterJob(c, r, wait, "template "+id, apiPath(tplPath, id)); err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) {
				tplPrint(e, c, r)
				if !wait {
					fmt.Fprintf(e.stdout, "building (job %s)\n", r.Str("jobId"))
				}
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "template name (required)")
	cmd.Flags().StringVar(&description, "description", "", "what the template holds")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the template is ready or failed")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func tplUpdate(e *env) *cobra.Command {
	var name, description string
	var warm int
	cmd := &cobra.Command{
		Use: "update TEMPLATE", Short: "Rename a template, describe it or size its warm pool", Args: cobra.ExactArgs(1),
		Example: `  sandboxctl templates update tpl_abc --name "Shop demo v2"
  sandboxctl templates update tpl_abc --warm-pool 2   # paid plan
  sandboxctl launch set tpl_abc --enabled     # launch link settings live there`,
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if cmd.Flags().Changed("name") {
				body["name"] = name
			}
			if cmd.Flags().Changed("description") {
				body["description"] = description
			}
			if cmd.Flags().Changed("warm-pool") {
				body["warmPoolSize"] = warm
			}
			if len(body) == 0 {
				return usageError{fmt.Errorf("nothing to change: give --name, --description or --warm-pool")}
			}
			return tplSend(e, "PATCH", args[0], body, tplPrint)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "new name")
	cmd.Flags().StringVar(&description, "description", "", "new description (\"\" clears it)")
	cmd.Flags().IntVar(&warm, "warm-pool", 0, "ready sites kept per node (paid plan)")
	return cmd
}

func tplDelete(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "delete TEMPLATE", Short: "Delete a template (sites made from it keep working)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl templates delete tpl_abc",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("DELETE", apiPath(tplPath, args[0]), nil, func(*apiclient.Response) {
				fmt.Fprintf(e.stdout, "deleted template %s\n", args[0])
			})
		},
	}
}

func tplLeads(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "leads TEMPLATE", Short: "Leads its launch link captured (entry mode email)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl templates leads tpl_abc\n  sandboxctl templates leads tpl_abc --json | jq -r '.leads[].email'",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("GET", apiPath(tplPath, args[0], "leads"), nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, l := range r.List("leads") {
					rows = append(rows, []string{wsctlText(l["email"], 36), str(l["siteId"]), ago(l["createdAt"])})
				}
				e.table([]string{"EMAIL", "SITE", "CAPTURED"}, rows)
			})
		},
	}
}

func tplLaunch(e *env) *cobra.Command {
	var name string
	var expires int
	var wait bool
	cmd := &cobra.Command{
		Use: "launch TEMPLATE", Short: "Make a site from a ready template (202: its job runs on)", Args: cobra.ExactArgs(1),
		Example: `  sandboxctl templates launch tpl_abc --name demo --wait
  sandboxctl templates launch tpl_abc --expires 60 --json | jq -r .site.id`,
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if name != "" {
				body["name"] = name
			}
			if expires > 0 {
				body["expiresInMinutes"] = expires
			}
			c, r, err := e.request("POST", apiPath(tplPath, args[0], "sites"), body, "Idempotency-Key", e.idempotencyKey())
			if err != nil {
				return err
			}
			site := r.Str("site.id")
			if r, err = e.afterJob(c, r, wait, "site "+site, sitesAPI(site, "")); err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) {
				printSite(e, r)
				if !wait {
					fmt.Fprintf(e.stdout, "creating (job %s)\n", r.Str("jobId"))
				}
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "site name (default: the template's)")
	cmd.Flags().IntVar(&expires, "expires", 0, "minutes until the site is deleted (0: the plan's default)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the site is ready (or its job failed)")
	return cmd
}
