package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() {
	siteCommands = append(siteCommands, sitesDebug, sitesMail)
}

// sitesMaxLogLines is the most trailing lines the API returns at once
// (GET …/debug/log?lines= is clamped to 1..2000; 500 when omitted).
const (
	sitesMaxLogLines     = 2000
	sitesDefaultLogLines = 500
)

// sitesLogPollEvery is how often `debug log --follow` asks again.
var sitesLogPollEvery = 2 * time.Second

// sitesInterrupted is the context `debug log --follow` runs under: done
// on Ctrl-C. Tests replace it to stop a follow without a signal.
var sitesInterrupted = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}

func sitesDebug(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "debug SITE",
		Short: "WordPress debug settings: show, on, off; the debug log",
		Example: "  sandboxctl sites debug site_abc\n" +
			"  sandboxctl sites debug on site_abc\n" +
			"  sandboxctl sites debug log site_abc --follow",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("GET", sitesAPI(args[0], "/debug"), nil, func(r *apiclient.Response) { sitesPrintDebug(e, r) })
		},
	}
	c.AddCommand(sitesDebugSwitch(e, true), sitesDebugSwitch(e, false), sitesDebugLog(e))
	return c
}

// sitesPrintDebug shows a {debug} answer: each setting, on or not.
func sitesPrintDebug(e *env, r *apiclient.Response) {
	e.table([]string{"SETTING", "ON"}, [][]string{
		{"WP_DEBUG", sitesYesNo(r.Get("debug.wpDebug"))},
		{"WP_DEBUG_LOG", sitesYesNo(r.Get("debug.wpDebugLog"))},
		{"WP_DEBUG_DISPLAY", sitesYesNo(r.Get("debug.wpDebugDisplay"))},
		{"SCRIPT_DEBUG", sitesYesNo(r.Get("debug.scriptDebug"))},
	})
}

// sitesDebugSwitch is `debug on` or `debug off`: a PUT of the settings
// (the API has no DELETE; off is every setting false).
func sitesDebugSwitch(e *env, on bool) *cobra.Command {
	var display, script bool
	use, short := "off SITE", "Turn every WordPress debug setting off"
	example := "  sandboxctl sites debug off site_abc"
	if on {
		use, short = "on SITE", "Turn WP_DEBUG and WP_DEBUG_LOG on (the log starts filling)"
		example = "  sandboxctl sites debug on site_abc\n  sandboxctl sites debug on site_abc --display --script"
	}
	c := &cobra.Command{
		Use: use, Short: short, Example: example, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]bool{"wpDebug": on, "wpDebugLog": on}
			if !on || display {
				body["wpDebugDisplay"] = on
			}
			if !on || script {
				body["scriptDebug"] = on
			}
			return e.send("PUT", sitesAPI(args[0], "/debug"), body, func(r *apiclient.Response) { sitesPrintDebug(e, r) })
		},
	}
	if on {
		c.Flags().BoolVar(&display, "display", false, "also show errors in the pages (WP_DEBUG_DISPLAY)")
		c.Flags().BoolVar(&script, "script", false, "also load unminified core scripts (SCRIPT_DEBUG)")
	}
	return c
}

func sitesDebugLog(e *env) *cobra.Command {
	var lines int
	var follow, clear bool
	c := &cobra.Command{
		Use:   "log SITE",
		Short: "Print the end of wp-content/debug.log (--follow: like tail -f)",
		Long: `log prints the last lines of the site's wp-content/debug.log as they are.
--follow asks again every 2 seconds and prints only the lines that are new,
like tail -f, until Ctrl-C; when the log was truncated or rotated it says
so on stderr and prints it from its start. --clear empties the log first.`,
		Example: "  sandboxctl sites debug log site_abc --lines 50\n" +
			"  sandboxctl sites debug log site_abc --follow\n" +
			"  sandboxctl sites debug log site_abc --clear",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if lines < 0 || lines > sitesMaxLogLines {
				return usageError{fmt.Errorf("--lines must be 1..%d", sitesMaxLogLines)}
			}
			if follow && e.json {
				return usageError{errors.New("--follow prints the log's lines; it does not take --json")}
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			path := sitesAPI(args[0], "/debug/log")
			if clear {
				r, err := call(c, "DELETE", path, nil)
				if err != nil {
					return err
				}
				if !follow {
					return e.reply(r, func(*apiclient.Response) { fmt.Fprintf(e.stdout, "cleared the debug log of %s\n", args[0]) })
				}
			}
			if follow {
				if lines == 0 {
					lines = sitesDefaultLogLines
				}
				return sitesFollowLog(e, c, path, lines)
			}
			if lines > 0 {
				path += "?lines=" + strconv.Itoa(lines)
			}
			r, err := call(c, "GET", path, nil)
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(r)
			}
			if exists, _ := r.Get("exists").(bool); !exists {
				fmt.Fprintf(e.stderr, "sandboxctl: %s has no debug log yet (turn it on: sandboxctl sites debug on %s)\n", args[0], args[0])
				return nil
			}
			content := r.Str("content")
			if content != "" && !strings.HasSuffix(content, "\n") {
				content += "\n"
			}
			_, err = fmt.Fprint(e.stdout, content)
			return err
		},
	}
	c.Flags().IntVarP(&lines, "lines", "n", 0, "how many trailing lines, 1..2000 (default: 500)")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines every 2 s until Ctrl-C")
	c.Flags().BoolVar(&clear, "clear", false, "empty the log (then follow it with --follow)")
	return c
}

// sitesFollowLog prints the last n lines of the log, then every
// sitesLogPollEvery the lines that are new, until interrupted.
func sitesFollowLog(e *env, c *apiclient.Client, path string, n int) error {
	ctx, stop := sitesInterrupted()
	defer stop()
	path += "?lines=" + strconv.Itoa(sitesMaxLogLines)
	var f sitesLogFollower
	for first := true; ; first = false {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		r, err := c.Call(rctx, "GET", path, nil)
		cancel()
		if ctx.Err() != nil {
			return nil // Ctrl-C: done, as tail -f is
		}
		if err != nil {
			return err
		}
		exists, _ := r.Get("exists").(bool)
		truncated, _ := r.Get("truncated").(bool)
		fresh, reset := f.next(r.Str("content"), exists, truncated, sitesMaxLogLines)
		if first && len(fresh) > n {
			fresh = fresh[len(fresh)-n:]
		}
		if reset {
			fmt.Fprintln(e.stderr, "sandboxctl: the debug log was truncated or rotated; from its start:")
		}
		for _, l := range fresh {
			fmt.Fprintln(e.stdout, l)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(sitesLogPollEvery):
		}
	}
}

// sitesLogFollower finds what is new in successive tails of a log. The
// API answers the last lines (at most window) without offsets, so each
// tail is lined up with the one before: a log only grows, so the new tail
// starts with an end of the old one; when no such overlap exists (or the
// log got shorter) it was truncated or rotated, and the new tail is all
// new. A tail that is the whole log must start with the whole previous
// log. A run of identical lines longer than the overlap can hide lines
// appended in the same poll: without offsets nothing can tell them apart.
type sitesLogFollower struct {
	started bool
	prev    []string
	// prevWhole: prev was the whole log, not a window of its end.
	prevWhole bool
}

// next takes one tail (content as the API sent it, the log's existence,
// and whether it was cut to the API's byte limit) and returns the lines
// not returned before; reset says the log was truncated or rotated. A
// last line without its newline is held back until it is complete; the
// first line of a byte-limited tail may be a piece of a line, so it is
// dropped.
func (f *sitesLogFollower) next(content string, exists, byteCut bool, window int) (fresh []string, reset bool) {
	var cur []string
	if exists && content != "" {
		cur = strings.Split(content, "\n")
	}
	lines := len(cur) // content "a\nb\n" is two lines, "a\nb" too
	if strings.HasSuffix(content, "\n") {
		lines--
	}
	whole := !byteCut && lines < window
	if len(cur) > 0 {
		cur = cur[:len(cur)-1] // "" after the last newline, or a line still being written
	}
	if byteCut && len(cur) > 0 {
		cur = cur[1:]
	}
	defer func() { f.started, f.prev, f.prevWhole = true, cur, whole }()
	if !f.started {
		return cur, false
	}
	prev := f.prev
	switch {
	case f.prevWhole && len(cur) >= len(prev) && slices.Equal(cur[:len(prev)], prev):
		return cur[len(prev):], false // grew
	case !f.prevWhole && whole:
		return cur, true // was longer than the window, now shorter: truncated
	case f.prevWhole && whole:
		return cur, true // whole both times, but not the same start: rewritten
	}
	// At least one of them is a window of the end: line them up.
	for k := min(len(prev), len(cur)); k > 0; k-- {
		if slices.Equal(prev[len(prev)-k:], cur[:k]) {
			return cur[k:], false
		}
	}
	return cur, len(prev) > 0
}

func sitesMail(e *env) *cobra.Command {
	var clear bool
	c := &cobra.Command{
		Use:   "mail SITE [N|ID]",
		Short: "Mail a site sent (captured, never delivered)",
		Long: `mail SITE lists the mail the site sent (PHP mail(), wp_mail), captured and
never delivered, newest first and numbered. mail SITE N prints message N
(or the one whose id is given) with its text; with --json that message is
printed as {"email": {...}}, the object as the API sent it. --clear
deletes it all.`,
		Example: "  sandboxctl sites mail site_abc\n" +
			"  sandboxctl sites mail site_abc 1      # the newest message\n" +
			"  sandboxctl sites mail site_abc --clear",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if clear {
				if len(args) > 1 {
					return usageError{errors.New("--clear deletes all the mail; it takes no message")}
				}
				return e.send("DELETE", sitesAPI(args[0], "/email"), nil, func(*apiclient.Response) {
					fmt.Fprintf(e.stdout, "cleared the mail of %s\n", args[0])
				})
			}
			r, err := e.api("GET", sitesAPI(args[0], "/email"), nil)
			if err != nil {
				return err
			}
			mails := r.List("emails")
			if len(args) == 2 {
				return sitesPrintMail(e, args[0], mails, args[1])
			}
			return e.reply(r, func(*apiclient.Response) {
				if len(mails) == 0 {
					fmt.Fprintf(e.stdout, "%s has sent no mail\n", args[0])
					return
				}
				rows := make([][]string, 0, len(mails))
				for i, m := range mails {
					rows = append(rows, []string{strconv.Itoa(i + 1), ago(m["date"]), clip(str(m["to"]), 26), clip(str(m["subject"]), 36)})
				}
				e.table([]string{"#", "WHEN", "TO", "SUBJECT"}, rows)
			})
		},
	}
	c.Flags().BoolVar(&clear, "clear", false, "delete the captured mail")
	return c
}

// sitesPrintMail prints one message, chosen by its number in the list
// (1: the newest) or its id.
func sitesPrintMail(e *env, site string, mails []map[string]any, which string) error {
	var m map[string]any
	if n, err := strconv.Atoi(which); err == nil && n >= 1 && n <= len(mails) {
		m = mails[n-1]
	}
	for _, x := range mails {
		if m == nil && str(x["id"]) == which {
			m = x
		}
	}
	if m == nil {
		return fmt.Errorf("%s has no message %s (it holds %d)", site, which, len(mails))
	}
	if e.json {
		return sitesPrintValue(e, map[string]any{"email": m})
	}
	fmt.Fprintf(e.stdout, "From:    %s\nTo:      %s\nDate:    %s (%s)\nSubject: %s\n\n", str(m["from"]), str(m["to"]),
		str(m["date"]), ago(m["date"]), str(m["subject"]))
	text, _ := m["text"].(string)
	if text == "" {
		text = "(no text part; the HTML part is in --json)"
	}
	fmt.Fprintln(e.stdout, strings.TrimRight(text, "\n"))
	return nil
}
