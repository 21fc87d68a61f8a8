package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

// bpRunExit is the part of Long that says how a watched run ends.
const bpRunExit = `
With --watch the command follows the run's steps until it ends (see
blueprints watch): exit code 0 when the run succeeds, 1 when it fails
(the run's error code and reason on stderr).`

func blueprintsRun(e *env) *cobra.Command {
	var name string
	var watch bool
	c := &cobra.Command{
		Use:   "run BLUEPRINT",
		Short: "Make a site from a saved Blueprint",
		Long: `run makes a site from a saved Blueprint: the site is made (on the PHP
version its preferredVersions ask for), then the Blueprint runs on it step
by step. A Blueprint with error findings is refused with them.` + "\n" + bpRunExit,
		Example: "  sandboxctl blueprints run bp_abc --name demo --watch\n" +
			"  sandboxctl blueprints run bp_abc --json | jq -r .run.id",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if name != "" {
				body["name"] = name
			}
			c, r, err := e.request("POST", apiPath(bpPath, args[0], "sites"), body)
			if err != nil {
				return bpExplain(e, err)
			}
			if !e.json {
				printSite(e, r)
			}
			return bpStarted(e, c, r, watch, func() error {
				if !e.json {
					fmt.Fprintf(e.stdout, "site %s is ready: %s\n", r.Str("site.id"), r.Str("site.url"))
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&name, "name", "", "site name (default: the Blueprint's)")
	c.Flags().BoolVar(&watch, "watch", false, "follow the run's steps until it ends")
	return c
}

func blueprintsApply(e *env) *cobra.Command {
	var file string
	var watch bool
	c := &cobra.Command{
		Use:   "apply SITE BLUEPRINT|--file FILE",
		Short: "Run a Blueprint on a ready site (on its own PHP and WordPress)",
		Long: `apply runs a saved Blueprint (or, with --file, a Blueprint file that is not
saved) on a site that is ready. A Blueprint with error findings is refused
with them.` + "\n" + bpRunExit,
		Example: "  sandboxctl blueprints apply site_abc bp_abc --watch\n" +
			"  sandboxctl blueprints apply site_abc --file blueprint.json --watch",
		Args: func(cmd *cobra.Command, args []string) error {
			if file != "" {
				return cobra.ExactArgs(1)(cmd, args)
			}
			if len(args) == 1 {
				return usageError{errors.New("give the Blueprint: a saved one's id, or --file FILE")}
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if file != "" {
				src, err := bpReadSource(e, file)
				if err != nil {
					return err
				}
				body["source"] = json.RawMessage(src)
			} else {
				body["blueprintId"] = args[1]
			}
			c, r, err := e.request("POST", sitesAPI(args[0], "/blueprint"), body)
			if err != nil {
				return bpExplain(e, err)
			}
			return bpStarted(e, c, r, watch, nil)
		},
	}
	c.Flags().StringVar(&file, "file", "", "a Blueprint file to run without saving it (\"-\": stdin)")
	c.Flags().BoolVar(&watch, "watch", false, "follow the run's steps until it ends")
	return c
}

func blueprintsBake(e *env) *cobra.Command {
	var name, description, template string
	var watch bool
	c := &cobra.Command{
		Use:   "bake BLUEPRINT",
		Short: "Bake a saved Blueprint into a template",
		Long: `bake makes a template from a saved Blueprint: a scratch site is made, the
Blueprint runs on it, the site is frozen into the template (building until
then) and removed. With --template, a template baked from this Blueprint
is rebuilt: the new one takes its slug, launch link and settings once it
is ready. The name defaults to the Blueprint's (on a rebake, the
template's).` + "\n" + bpRunExit + `
With --watch the command also waits for the template to be ready.`,
		Example: "  sandboxctl blueprints bake bp_abc --name \"Shop demo\" --watch\n" +
			"  sandboxctl blueprints bake bp_abc --template tpl_abc --watch   # rebake",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			for k, v := range map[string]string{"name": name, "description": description, "templateId": template} {
				if v != "" {
					body[k] = v
				}
			}
			c, r, err := e.request("POST", apiPath(bpPath, args[0], "bake"), body)
			if err != nil {
				return bpExplain(e, err)
			}
			if !e.json {
				e.table([]string{"TEMPLATE", "NAME", "STATUS"}, [][]string{{r.Str("template.id"), clip(r.Str("template.name"), 40), r.Str("template.status")}})
			}
			return bpStarted(e, c, r, watch, func() error {
				// The run is done; the template is frozen from its site next,
				// by the same job.
				if !e.json {
					fmt.Fprintf(e.stdout, "making template %s from the site…\n", r.Str("template.id"))
				}
				if err := waitJob(e, c, r.Str("run.jobId")); err != nil {
					return err
				}
				t, err := call(c, "GET", apiPath(tplPath, r.Str("template.id")), nil)
				if err != nil {
					return fmt.Errorf("read template %s: %w", r.Str("template.id"), err)
				}
				if !e.json {
					fmt.Fprintf(e.stdout, "template %s (%s) is %s\n", t.Str("template.id"), t.Str("template.name"), t.Str("template.status"))
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&name, "name", "", "template name (default: the Blueprint's)")
	c.Flags().StringVar(&description, "description", "", "template description")
	c.Flags().StringVar(&template, "template", "", "rebake this template (one baked from the Blueprint)")
	c.Flags().BoolVar(&watch, "watch", false, "follow the run's steps, then wait for the template")
	return c
}

// bpStarted reports a run just started (the answer holds run) and, with
// watch, follows it; done, when set, runs after a run that succeeded.
func bpStarted(e *env, c *apiclient.Client, r *apiclient.Response, watch bool, done func() error) error {
	bp := orElse(r.Str("run.blueprintId"), "unsaved")
	run := r.Str("run.id")
	if !watch {
		return e.reply(r, func(r *apiclient.Response) {
			fmt.Fprintf(e.stdout, "run %s is %s; follow it: sandboxctl blueprints watch %s %s\n", run, r.Str("run.status"), bp, run)
		})
	}
	return bpFollow(e, c, bp, run, done)
}

// bpFollow watches a run until it ends (bpWatchRun); done, when set,
// runs after a run that succeeded. With --json the run's last answer is
// printed, whatever the outcome.
func bpFollow(e *env, c *apiclient.Client, bp, run string, done func() error) error {
	final, err := bpWatchRun(e, c, bp, run)
	if err == nil && done != nil {
		err = done()
	}
	if e.json && final != nil {
		if perr := e.printJSON(final); perr != nil {
			return perr
		}
	}
	return err
}

func blueprintsRuns(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "runs BLUEPRINT", Short: "A saved Blueprint's runs, newest first", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl blueprints runs bp_abc\n  sandboxctl blueprints runs bp_abc --json | jq -r '.runs[0].id'",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("GET", apiPath(bpPath, args[0], "runs"), nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, run := range r.List("runs") {
					steps := bpMaps(run["steps"])
					done := 0
					for _, s := range steps {
						if s["status"] == "succeeded" {
							done++
						}
					}
					rows = append(rows, []string{str(run["id"]), str(run["mode"]), str(run["status"]),
						fmt.Sprintf("%d/%d", done, len(steps)), clip(str(run["siteId"]), 21), ago(run["createdAt"])})
				}
				e.table([]string{"RUN", "MODE", "STATUS", "STEPS", "SITE", "CREATED"}, rows)
			})
		},
	}
}

func blueprintsWatch(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "watch BLUEPRINT RUN",
		Short: "Follow a run's steps live until it ends",
		Long: `watch polls a run about once a second and shows its steps as they change.
On a terminal it redraws a compact list in place (status, step number,
name, duration); otherwise it prints one line per change of a step
(step 3/7 installPlugin: running, then done (2.1 s) or failed: why). A
failed run ends with the tail of its log. Colours only on a terminal, and
not with NO_COLOR set. BLUEPRINT is "unsaved" for a Blueprint applied from
a file. --json prints only the final run object.

Exit codes: 0 when the run succeeds; 1 when it fails (its error code and
reason on stderr) or cannot be read; Ctrl-C stops watching, not the run.`,
		Example: "  sandboxctl blueprints watch bp_abc bpr_abc\n" +
			"  sandboxctl blueprints watch unsaved bpr_abc --json | jq -r .run.status",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return bpFollow(e, c, args[0], args[1], nil)
		},
	}
}

// bpRunFailed is the error of a run that failed: the code of its job's
// failure when the job says one, else blueprint_run_failed (the code the
// server's job gives a failed run), with the run's reason.
func bpRunFailed(c *apiclient.Client, r *apiclient.Response) error {
	code := "blueprint_run_failed"
	if job := r.Str("run.jobId"); job != "" {
		if j, err := call(c, "GET", apiPath("/api/app/jobs", job), nil); err == nil &&
			j.Str("job.status") == "failed" && j.Str("job.error.code") != "" {
			code = j.Str("job.error.code")
		}
	}
	msg := strings.TrimSpace(r.Str("run.failureReason"))
	if msg == "" {
		msg = "the Blueprint run failed"
	}
	return &apiclient.Error{Status: 200, Code: code, Message: msg}
}
