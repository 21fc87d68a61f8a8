package main

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, usageCmd) }

// usageLabels names the plan's limits for a person, in the order shown;
// a limit the server adds later is shown under its own key.
var usageLabels = []struct{ key, label string }{
	{"sites", "live sites"},
	{"templates", "templates"},
	{"blueprints", "blueprints"},
	{"workspaces", "workspaces owned"},
	{"membersPerWorkspace", "members per workspace"},
	{"libraryEntries", "library entries per workspace"},
	{"apiTokens", "API tokens"},
	{"sshKeys", "SSH keys"},
	{"siteDiskMb", "disk per site (MiB)"},
	{"siteLifetimeMinutes", "site lifetime (minutes)"},
}

func usageCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "usage", Short: "What your account holds next to its plan's limits", Args: cobra.NoArgs,
		Example: "  sandboxctl usage\n  sandboxctl usage --json | jq .usage.counts",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", "/api/account/usage", nil, func(r *apiclient.Response) { usagePrint(e, r) })
		},
	}
}

// usagePrint shows a {usage} answer: the plan, then one row per limit.
func usagePrint(e *env, r *apiclient.Response) {
	limits, _ := r.Get("usage.limits").(map[string]any)
	counts, _ := r.Get("usage.counts").(map[string]any)
	fmt.Fprintf(e.stdout, "plan: %s\n", r.Str("usage.plan"))
	seen := map[string]bool{}
	keys := []struct{ key, label string }{}
	for _, l := range usageLabels {
		if _, ok := limits[l.key]; ok {
			keys = append(keys, l)
			seen[l.key] = true
		}
	}
	var extra []string
	for k := range limits {
		if !seen[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		keys = append(keys, struct{ key, label string }{k, k})
	}
	var rows [][]string
	for _, k := range keys {
		used := "-"
		if n, ok := counts[k.key]; ok {
			used = fmt.Sprint(n)
		}
		limit := fmt.Sprint(limits[k.key])
		if n, _ := limits[k.key].(float64); n == 0 {
			limit = "unlimited"
			if k.key == "siteDiskMb" {
				limit = "node default"
			}
		}
		rows = append(rows, []string{k.label, used, limit})
	}
	e.table([]string{"RESOURCE", "USED", "LIMIT"}, rows)
}
