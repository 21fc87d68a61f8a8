package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, webhookCmd) }

const hookPath = "/api/account/webhooks/demo-launches"

func webhookCmd(e *env) *cobra.Command {
	c := group("webhook", "The selected workspace's demo-launch webhook (paid plan)",
		`  sandboxctl webhook set https://hooks.example.com/sandbox
  sandboxctl webhook test
  sandboxctl webhook get`,
		hookGet(e), hookSet(e), hookTest(e), hookRotate(e), hookDelete(e))
	c.Long = `The selected workspace's demo-launch webhook (paid plan, integrations
capability): demo.ready and demo.expired events of its templates' launch
links are POSTed there, signed with its secret (x-service-signature).`
	return c
}

// hookPrint shows a {webhook} answer.
func hookPrint(e *env, r *apiclient.Response) {
	if r.Get("webhook") == nil {
		fmt.Fprintln(e.stdout, "no webhook set (set one: sandboxctl webhook set URL)")
		return
	}
	events := "on"
	if on, _ := r.Get("webhook.sendEvents").(bool); !on {
		events = "paused"
	}
	rows := [][2]string{{"url", clip(r.Str("webhook.url"), 60)}, {"events", events}}
	if r.Get("webhook.lastDelivery") == nil {
		rows = append(rows, [2]string{"last delivery", "none yet"})
	} else {
		rows = append(rows, [2]string{"last delivery", hookDelivery(r, "webhook.lastDelivery")})
		if msg := r.Str("webhook.lastDelivery.error"); msg != "" {
			rows = append(rows, [2]string{"its error", clip(msg, 60)})
		}
	}
	rows = append(rows, [2]string{"updated", ago(r.Get("webhook.updatedAt"))})
	e.fields(rows)
}

// hookDelivery is one delivery in a short line: event, status, the
// receiver's HTTP status, attempt and when (its error goes apart).
func hookDelivery(r *apiclient.Response, at string) string {
	s := fmt.Sprintf("%s %s", r.Str(at+".event"), r.Str(at+".status"))
	if code := r.Get(at + ".httpStatus"); code != nil {
		s += fmt.Sprintf(" (HTTP %v)", code)
	}
	return s + fmt.Sprintf(", attempt %v, %s", r.Get(at+".attempt"), ago(r.Get(at+".at")))
}

func hookGet(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "get", Short: "The webhook and its most recent delivery (never its secret)", Args: cobra.NoArgs,
		Example: "  sandboxctl webhook get\n  sandboxctl webhook get --json | jq .webhook.lastDelivery",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", hookPath, nil, func(r *apiclient.Response) { hookPrint(e, r) })
		},
	}
}

// hookSecret prints the signing secret of an answer that carries one.
func hookSecret(e *env, r *apiclient.Response) {
	if s := r.Str("signingSecret"); s != "" {
		fmt.Fprintf(e.stdout, "signing secret (shown this once; it checks the x-service-signature header):\n%s\n", s)
	}
}

func hookSet(e *env) *cobra.Command {
	var send bool
	cmd := &cobra.Command{
		Use: "set URL", Short: "Set where demo events go (prints the signing secret once)", Args: cobra.ExactArgs(1),
		Example: `  sandboxctl webhook set https://hooks.example.com/sandbox
  sandboxctl webhook set https://example.com/hook --send-events=false   # pause
  sandboxctl webhook set https://example.com/hook --json | jq -r .signingSecret`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("PUT", hookPath, map[string]any{"url": args[0], "sendEvents": send}, func(r *apiclient.Response) {
				hookPrint(e, r)
				hookSecret(e, r)
			})
		},
	}
	cmd.Flags().BoolVar(&send, "send-events", true, "deliver events (false: paused, URL kept)")
	return cmd
}

func hookTest(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "test", Short: "Send a test event now (exit 1 if it was not delivered)", Args: cobra.NoArgs,
		Example: "  sandboxctl webhook test\n  sandboxctl webhook test --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := e.api("POST", hookPath+"/test", nil)
			if err != nil {
				return err
			}
			if err := e.reply(r, func(r *apiclient.Response) {
				if r.Get("delivery") != nil {
					fmt.Fprintf(e.stdout, "test event %s\n", hookDelivery(r, "delivery"))
				}
			}); err != nil {
				return err
			}
			if status := r.Str("delivery.status"); status != "delivered" {
				msg := r.Str("delivery.error")
				if code := r.Get("delivery.httpStatus"); code != nil {
					msg = strings.TrimSpace(fmt.Sprintf("HTTP %v %s", code, msg))
				}
				return fmt.Errorf("the test event was not delivered (%s): %s", status, msg)
			}
			return nil
		},
	}
}

func hookRotate(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "rotate-secret", Short: "Replace the signing secret (the new one is printed once)", Args: cobra.NoArgs,
		Example: "  sandboxctl webhook rotate-secret\n  sandboxctl webhook rotate-secret --json | jq -r .signingSecret",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("POST", hookPath+"/rotate-secret", nil, func(r *apiclient.Response) { hookSecret(e, r) })
		},
	}
}

func hookDelete(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "delete", Short: "Remove the webhook, its secret and its delivery history", Args: cobra.NoArgs,
		Example: "  sandboxctl webhook delete",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("DELETE", hookPath, nil, func(*apiclient.Response) {
				fmt.Fprintln(e.stdout, "webhook removed")
			})
		},
	}
}
