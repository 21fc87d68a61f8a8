package main

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, launchCmd) }

func launchCmd(e *env) *cobra.Command {
	return group("launch", "A template's public launch link: its settings and URL",
		`  sandboxctl launch set tpl_abc --enabled --entry email --minutes 120
  sandboxctl launch get tpl_abc
  sandboxctl launch url tpl_abc`,
		launchGet(e), launchSet(e), launchURLCmd(e))
}

// launchURL is the public launch link of a {template} answer, or "" when
// the link is off: the server's /launch/{launchToken} page.
func launchURL(c *apiclient.Client, r *apiclient.Response) string {
	tok := r.Str("template.launchToken")
	if on, _ := r.Get("template.launchEnabled").(bool); !on || tok == "" {
		return ""
	}
	return c.Base + "/launch/" + url.PathEscape(tok)
}

func launchGet(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "get TEMPLATE", Short: "A template's launch link settings", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl launch get tpl_abc\n  sandboxctl launch get tpl_abc --json | jq .template.launchBranding",
		RunE: func(cmd *cobra.Command, args []string) error {
			return tplSend(e, "GET", args[0], nil, launchPrint)
		},
	}
}

// launchPrint shows the launch settings of a {template} answer.
func launchPrint(e *env, c *apiclient.Client, r *apiclient.Response) {
	get := func(f string) any { return r.Get("template." + f) }
	rows := [][2]string{{"template", r.Str("template.id")}, {"enabled", wsctlOnOff(get("launchEnabled"))}}
	if u := launchURL(c, r); u != "" {
		rows = append(rows, [2]string{"url", u})
	}
	expiry := r.Str("template.launchExpirationMode")
	if expiry == "fixed" {
		expiry = fmt.Sprintf("fixed, %v minutes", get("launchExpirationMinutes"))
	}
	rows = append(rows, [][2]string{
		{"launches", str(get("launchCount"))}, {"quota", str(get("launchQuotaMode"))}, {"entry", str(get("launchEntryMode"))},
		{"expiration", expiry}, {"landing path", wsctlText(get("launchLandingPath"), 60)},
		{"protected", wsctlOnOff(get("launchProtected"))}, {"consent", wsctlOnOff(get("launchConsentEnabled"))},
	}...)
	if on, _ := get("launchConsentEnabled").(bool); on {
		rows = append(rows, [2]string{"consent label", wsctlText(get("launchConsentLabel"), 60)},
			[2]string{"consent checked", wsctlOnOff(get("launchConsentDefaultChecked"))})
	}
	for _, b := range launchBranding {
		v := r.Get("template.launchBranding." + b.field)
		if s, ok := v.(string); ok && s != "" {
			rows = append(rows, [2]string{b.flag, clip(s, 60)})
		}
	}
	if hide, _ := r.Get("template.launchBranding.hidePoweredBy").(bool); hide {
		rows = append(rows, [2]string{"hide-powered-by", "on"})
	}
	e.fields(rows)
}

// launchBranding maps the launcher's text branding fields to flags.
var launchBranding = []struct{ flag, field, help string }{
	{"eyebrow", "eyebrow", "small line above the headline"},
	{"headline", "headline", "the page's headline"},
	{"subhead", "subhead", "text under the headline"},
	{"button-label", "buttonLabel", "the launch button's label"},
	{"logo-url", "logoUrl", "https URL of a logo (\"\" removes it)"},
	{"brand-name", "brandName", "your brand's name"},
	{"accent-color", "accentColor", "hex colour such as #1e40af"},
	{"background-color", "backgroundColor", "hex colour"},
	{"background-image-url", "backgroundImageUrl", "https URL of a background image"},
}

// launchEnums maps the flags with fixed values to their field and values.
var launchEnums = []struct {
	flag, field string
	values      []string
	help        string
}{
	{"quota", "launchQuotaMode", []string{"visitor", "unlimited"}, "visitor (one demo each) or unlimited"},
	{"entry", "launchEntryMode", []string{"anonymous", "email"}, "anonymous, or email (collects leads)"},
	{"expiration", "launchExpirationMode", []string{"fixed", "none"}, "fixed (demos live --minutes) or none"},
}

// launchBools maps boolean flags to their field.
var launchBools = []struct{ flag, field, help string }{
	{"enabled", "launchEnabled", "link on (paid plan); --enabled=false: off"},
	{"protected", "launchProtected", "mark the launch link protected"},
	{"consent", "launchConsentEnabled", "show a consent checkbox on the launch page"},
	{"consent-checked", "launchConsentDefaultChecked", "the consent checkbox starts checked"},
}

func launchSet(e *env) *cobra.Command {
	var minutes int
	var landing, consentLabel string
	var hidePoweredBy bool
	enums := make([]string, len(launchEnums))
	bools := make([]bool, len(launchBools))
	brand := make([]string, len(launchBranding))
	cmd := &cobra.Command{
		Use: "set TEMPLATE --FLAG...", Short: "Change a template's launch link settings (only the flags given)", Args: cobra.ExactArgs(1),
		Example: `  sandboxctl launch set tpl_abc --enabled
  sandboxctl launch set tpl_abc --entry email --consent --consent-label "News?"
  sandboxctl launch set tpl_abc --expiration fixed --minutes 120
  sandboxctl launch set tpl_abc --landing-path /wp-admin/plugins.php
  sandboxctl launch set tpl_abc --headline "Try our shop" --accent-color "#f06"
  sandboxctl launch set tpl_abc --enabled=false`,
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			body := map[string]any{}
			for i, b := range launchBools {
				if fl.Changed(b.flag) {
					body[b.field] = bools[i]
				}
			}
			for i, en := range launchEnums {
				if !fl.Changed(en.flag) {
					continue
				}
				if !slices.Contains(en.values, enums[i]) {
					return usageError{fmt.Errorf("--%s must be one of %s", en.flag, strings.Join(en.values, ", "))}
				}
				body[en.field] = enums[i]
			}
			if fl.Changed("minutes") {
				body["launchExpirationMinutes"] = minutes
			}
			if fl.Changed("landing-path") {
				body["launchLandingPath"] = landing
			}
			if fl.Changed("consent-label") {
				body["launchConsentLabel"] = consentLabel
			}
			branding := map[string]any{}
			for i, b := range launchBranding {
				if fl.Changed(b.flag) {
					branding[b.field] = brand[i]
				}
			}
			if fl.Changed("hide-powered-by") {
				branding["hidePoweredBy"] = hidePoweredBy
			}
			if len(branding) > 0 {
				body["launchBranding"] = branding
			}
			if len(body) == 0 {
				return usageError{errors.New("nothing to change: give at least one setting (see --help)")}
			}
			return tplSend(e, "PATCH", args[0], body, launchPrint)
		},
	}
	fl := cmd.Flags()
	for i, b := range launchBools {
		fl.BoolVar(&bools[i], b.flag, false, b.help)
	}
	for i, en := range launchEnums {
		fl.StringVar(&enums[i], en.flag, "", en.help)
	}
	fl.IntVar(&minutes, "minutes", 0, "demo life with fixed expiration (1..43200)")
	fl.StringVar(&landing, "landing-path", "", "where visitors land, such as /wp-admin/")
	fl.StringVar(&consentLabel, "consent-label", "", "the consent checkbox's text")
	for i, b := range launchBranding {
		fl.StringVar(&brand[i], b.flag, "", b.help)
	}
	fl.BoolVar(&hidePoweredBy, "hide-powered-by", false, "hide the \"powered by\" line")
	return cmd
}

func launchURLCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "url TEMPLATE", Short: "Print the template's public launch link", Args: cobra.ExactArgs(1),
		Long: `Print the template's public launch link: the server's /launch/{launchToken}
page. With --json, the template as the API answers (launchToken included).
A template whose link is off is an error (exit 1).`,
		Example: "  sandboxctl launch url tpl_abc\n  sandboxctl launch url tpl_abc | xargs xdg-open",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, r, err := e.request("GET", apiPath(tplPath, args[0]), nil)
			if err != nil {
				return err
			}
			u := launchURL(c, r)
			if err := e.reply(r, func(*apiclient.Response) {
				if u != "" {
					fmt.Fprintln(e.stdout, u)
				}
			}); err != nil {
				return err
			}
			if u == "" {
				return fmt.Errorf("template %s: its launch link is off (turn it on: sandboxctl launch set %s --enabled)", args[0], args[0])
			}
			return nil
		},
	}
}
