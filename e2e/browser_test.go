package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser starts Debian's chromium headless with a fresh profile, as a
// person's browser with no cookies.
func browser(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	return browserFor(t, 60*time.Second)
}

// browserFor is browser with its own time limit (a long flow in one page).
func browserFor(t *testing.T, limit time.Duration) (context.Context, context.CancelFunc) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Fatal("chromium is not installed (deploy/dev/install-deps.sh installs it)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath("/usr/bin/chromium"),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, limit)
	return ctx, func() { cancelTimeout(); cancelCtx(); cancelAlloc() }
}

// visit opens url and returns where the browser ended up and the page's
// visible text.
func visit(t *testing.T, ctx context.Context, url string) (location, text string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		t.Fatalf("browse %s: %v", url, err)
	}
	location, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	return location, text
}
