package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/sandboxd/sandboxd/apiclient"
)

// Upload chunk bounds: the server takes at most 64 MiB per request.
const (
	importsDefaultChunk = 8 << 20
	importsMaxChunk     = 64 << 20
	importsMinChunk     = 1 << 10
)

// Knobs the tests turn.
var (
	// importsPollInterval is how often a restore is asked about.
	importsPollInterval = time.Second
	// importsRetryWait is the pause before a failed chunk is sent again
	// (times the attempt).
	importsRetryWait = 2 * time.Second
	// importsStopAfterChunksForTests, when positive, interrupts a push
	// after that many chunks of one run, as Ctrl-C would.
	importsStopAfterChunksForTests int
)

// importsInterrupted is a push stopped by SIGINT or SIGTERM: exit code 130.
type importsInterrupted struct{ what string }

func (e importsInterrupted) Error() string { return "interrupted " + e.what }

// ExitCode is 130, as a shell reports a command ended by SIGINT.
func (importsInterrupted) ExitCode() int { return 130 }

// importsOptions are the flags of push and resume.
type importsOptions struct {
	site, sourceURL, sql, chunk, rate string
	noWait, restart                   bool
	chunkBytes, rateBytes             int64
}

// parse checks --chunk-size and --limit-rate.
func (o *importsOptions) parse() error {
	o.chunkBytes = importsDefaultChunk
	if o.chunk != "" {
		n, err := importsParseSize(o.chunk)
		if err != nil {
			return usageError{fmt.Errorf("--chunk-size: %w", err)}
		}
		if n < importsMinChunk || n > importsMaxChunk {
			return usageError{fmt.Errorf("--chunk-size must be between 1K and 64M (the server's limit), not %s", o.chunk)}
		}
		o.chunkBytes = n
	}
	if o.rate != "" {
		n, err := importsParseSize(o.rate)
		if err != nil {
			return usageError{fmt.Errorf("--limit-rate: %w", err)}
		}
		o.rateBytes = n
	}
	return nil
}

var importsSizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b)?$`)

// importsParseSize reads a byte count as curl's --limit-rate does: a
// number with an optional K, M, G or T suffix (powers of 1024; "KB",
// "KiB" and "k" mean the same).
func importsParseSize(s string) (int64, error) {
	m := importsSizeRE.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil || (m[2] == "" && m[3] == "ib") {
		return 0, fmt.Errorf("%q is not a size (say 500K, 2M or 1048576)", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	mult := map[string]float64{"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m[2]]
	n := math.Round(v * mult)
	switch {
	case n < 1:
		return 0, fmt.Errorf("%q is less than one byte", s)
	case n > 1<<50:
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(n), nil
}

// importsPusher runs one push or resume.
type importsPusher struct {
	e    *env
	c    *apiclient.Client
	opts importsOptions
	// up sends chunks: no overall timeout, ctx ends an upload.
	up      *http.Client
	prog    importsProgress
	limiter *rate.Limiter
	// chunks counts the chunks of this run (the test knob's count).
	chunks int
	// interrupt cancels the run's context, for the test knob.
	interrupt context.CancelFunc
}

func newImportsPusher(e *env, c *apiclient.Client, opts importsOptions, interrupt context.CancelFunc) *importsPusher {
	p := &importsPusher{e: e, c: c, opts: opts, up: &http.Client{Transport: c.HTTP.Transport}, prog: importsNewProgress(e.stderr),
		interrupt: interrupt}
	if opts.rateBytes > 0 {
		burst := int(min(max(opts.rateBytes/8, 1), 64<<10))
		p.limiter = rate.NewLimiter(rate.Limit(opts.rateBytes), burst)
	}
	return p
}

func (p *importsPusher) say(format string, args ...any) {
	fmt.Fprintf(p.e.stderr, format+"\n", args...)
}

// call sends one API request that ctx (the signals) can stop.
func (p *importsPusher) call(ctx context.Context, method, path string, body any, header ...string) (*apiclient.Response, error) {
	return callCtx(ctx, p.c, method, path, body, header...)
}

func (p *importsPusher) get(ctx context.Context, id string) (*apiclient.Response, error) {
	return p.call(ctx, "GET", apiPath(importsPath, id), nil)
}

// importsIsCode reports an API error with that code.
func importsIsCode(err error, code string) bool {
	var ae *apiclient.Error
	return errors.As(err, &ae) && ae.Code == code
}

// importsNum is a JSON number of a decoded body.
func importsNum(v any) (int64, bool) {
	f, ok := v.(float64)
	return int64(f), ok
}

// push sends PATH: it goes on with a saved upload of the same server,
// workspace and PATH when there is one, or starts a new import.
func (p *importsPusher) push(ctx context.Context, path string, changed func(string) bool) error {
	src, err := importsInspect(path, p.opts.sql)
	if err != nil {
		return err
	}
	sourceURL := p.opts.sourceURL
	if sourceURL == "" && src.Dir {
		switch {
		case src.Config.Home != "":
			sourceURL = src.Config.Home
			p.say("source URL %s (WP_HOME in wp-config.php)", sourceURL)
		case src.Config.SiteURL != "":
			sourceURL = src.Config.SiteURL
			p.say("source URL %s (WP_SITEURL in wp-config.php)", sourceURL)
		}
	}
	if sourceURL == "" {
		return usageError{errors.New("--source-url is required: the live site's address (its WordPress home URL), " +
			"which becomes the sandbox's URL in the database")}
	}
	dir, err := importsCacheDir()
	if err != nil {
		return err
	}
	key := importsKey(p.c.Base, p.c.Workspace, src.Abs)
	st, err := importsLoadState(importsStatePath(dir, key))
	if err != nil && !p.opts.restart {
		return err
	}
	if st != nil && p.opts.restart {
		p.abandon(ctx, st, "--restart")
		st = nil
	}
	if st != nil {
		switch {
		case changed("source-url") && strings.TrimRight(sourceURL, "/") != strings.TrimRight(st.SourceURL, "/"):
			return usageError{fmt.Errorf("import %s of %s was started with --source-url %s: add --restart to start anew with %s",
				st.ImportID, path, st.SourceURL, sourceURL)}
		case changed("site") && p.opts.site != st.SiteID:
			return usageError{fmt.Errorf("import %s of %s was started with --site %q: add --restart to start anew with --site %q",
				st.ImportID, path, st.SiteID, p.opts.site)}
		}
		if done, err := p.goOn(ctx, st); done {
			return err
		}
	}
	_ = os.Remove(importsStatePath(dir, key))
	return p.start(ctx, src, sourceURL, dir, key)
}

// abandon drops a saved upload and cancels its import if the upload is
// unfinished (a restore under way is left to end).
func (p *importsPusher) abandon(ctx context.Context, st *importsState, why string) {
	if r, err := p.get(ctx, st.ImportID); err == nil {
		switch s := r.Str("import.status"); s {
		case "awaiting_upload", "uploading":
			if _, err := p.call(ctx, "DELETE", apiPath(importsPath, st.ImportID), nil); err == nil {
				p.say("%s: cancelled the earlier import %s", why, st.ImportID)
			}
		case "restoring":
			p.say("%s: the earlier import %s goes on restoring (sandboxctl imports cancel %s stops it)", why, st.ImportID, st.ImportID)
		}
	}
	st.remove()
}

// goOn continues a saved upload where the server is. It returns false
// when the state is stale (the import is gone or over, or its archive
// changed) and has been removed, so that a new import starts.
func (p *importsPusher) goOn(ctx context.Context, st *importsState) (bool, error) {
	r, err := p.get(ctx, st.ImportID)
	switch {
	case importsIsCode(err, "import_not_found"):
		p.say("the saved upload is stale: the server has no import %s any more; starting anew", st.ImportID)
		st.remove()
		return false, nil
	case err != nil:
		return true, fmt.Errorf("read import %s to resume it: %w", st.ImportID, err)
	}
	switch status := r.Str("import.status"); status {
	case "awaiting_upload", "uploading":
		size, sha, err := importsHashFile(ctx, st.Archive)
		if ctx.Err() != nil {
			return true, importsInterrupted{"before the upload went on"}
		}
		if err != nil || size != st.SizeBytes || sha != st.SHA256 {
			p.say("the saved upload is stale: the archive of import %s changed or is gone; starting anew", st.ImportID)
			p.abandon(ctx, st, "stale")
			return false, nil
		}
		off, ok := importsNum(r.Get("import.receivedBytes"))
		if !ok {
			off, _ = importsNum(r.Get("progress.bytesDone"))
		}
		p.say("resuming import %s from byte %d (%s of %s, %d%% uploaded before)", st.ImportID, off,
			byteSize(off), byteSize(st.SizeBytes), off*100/max(st.SizeBytes, 1))
		return true, p.upload(ctx, st, off)
	case "restoring":
		p.say("import %s is uploaded and restoring; waiting for it", st.ImportID)
		st.dropArchive()
		return true, p.wait(ctx, st)
	default:
		p.say("the saved upload is stale: import %s is %s already; starting anew", st.ImportID, status)
		st.remove()
		return false, nil
	}
}

// start packs a directory (or hashes an archive), makes the import and
// uploads it from the first byte.
func (p *importsPusher) start(ctx context.Context, src *importsSource, sourceURL, dir, key string) error {
	st := &importsState{Server: p.c.Base, Workspace: p.c.Workspace, Source: src.Abs, SourceURL: sourceURL, SiteID: p.opts.site,
		CreatedAt: time.Now().UTC(), path: importsStatePath(dir, key)}
	var err error
	if src.Dir {
		st.Archive, st.Cached = importsArchivePath(dir, key), true
		p.say("packing %s (dump %s)", src.Abs, src.Dump)
		var stats *importsPackStats
		st.SizeBytes, st.SHA256, stats, err = importsPack(ctx, src, st.Archive)
		if ctx.Err() != nil {
			return importsInterrupted{"while packing: nothing was uploaded"}
		}
		if err != nil {
			return err
		}
		p.say("packed files: %d (%s), symlinks: %d; archive: %s", stats.Files, byteSize(stats.Bytes), stats.Links, byteSize(st.SizeBytes))
		for _, s := range importsSortedSkips(stats.Skipped, 10) {
			p.say("  left out: %s", s)
		}
	} else {
		st.Archive = src.Abs
		if st.SizeBytes, st.SHA256, err = importsHashFile(ctx, src.Abs); err != nil {
			if ctx.Err() != nil {
				return importsInterrupted{"before the upload: nothing was uploaded"}
			}
			return err
		}
	}
	body := map[string]any{"sourceUrl": sourceURL, "sizeBytes": st.SizeBytes, "sourceKind": "archive"}
	if p.opts.site != "" {
		body["siteId"] = p.opts.site
	}
	// A key of this request only: the same archive pushed again later is
	// a new import, not a replay of this one.
	r, err := p.call(ctx, "POST", importsPath, body, "Idempotency-Key", p.e.idempotencyKey())
	if err != nil {
		st.dropArchive()
		if ctx.Err() != nil {
			return importsInterrupted{"before the upload: nothing was uploaded"}
		}
		return err
	}
	st.ImportID = r.Str("import.id")
	if st.ImportID == "" {
		st.dropArchive()
		return fmt.Errorf("create the import: the answer has no import id: %.200s", r.Raw)
	}
	if err := st.save(); err != nil {
		return err
	}
	p.say("import %s: uploading %s to %s", st.ImportID, byteSize(st.SizeBytes), p.c.Base)
	return p.upload(ctx, st, 0)
}

// upload sends the archive from off in chunks, completes the import and
// waits for the restore (unless --no-wait).
func (p *importsPusher) upload(ctx context.Context, st *importsState, off int64) error {
	f, err := os.Open(st.Archive)
	if err != nil {
		return fmt.Errorf("open the archive: %w", err)
	}
	defer f.Close()
	mismatches, failures := 0, 0
	for off < st.SizeBytes {
		if ctx.Err() != nil {
			return p.interrupted(st)
		}
		n := min(p.opts.chunkBytes, st.SizeBytes-off)
		var body io.Reader = &importsSendReader{r: io.NewSectionReader(f, off, n), at: off, total: st.SizeBytes, prog: p.prog}
		if p.limiter != nil {
			body = &importsRateReader{ctx: ctx, r: body, lim: p.limiter}
		}
		got, err := p.put(ctx, st.ImportID, off, body, n)
		if ctx.Err() != nil {
			return p.interrupted(st)
		}
		var ae *apiclient.Error
		isAPI := errors.As(err, &ae)
		switch {
		case isAPI && ae.Code == "offset_mismatch":
			exp, ok := importsNum(ae.Details["expectedOffset"])
			if mismatches++; !ok || exp < 0 || exp > st.SizeBytes || mismatches > 3 {
				return fmt.Errorf("upload import %s: %w", st.ImportID, err)
			}
			p.prog.Stop()
			p.say("the server holds %d bytes of import %s: going on from there", exp, st.ImportID)
			off = exp
			continue
		case err != nil && (!isAPI || ae.Status >= 500 || ae.Status == http.StatusTooManyRequests) && failures < 3:
			failures++
			wait := importsRetryWait * time.Duration(failures)
			p.prog.Stop()
			p.say("sending the chunk at byte %d failed (%v); trying again in %s", off, err, wait)
			select {
			case <-ctx.Done():
				return p.interrupted(st)
			case <-time.After(wait):
			}
			if r, gerr := p.get(ctx, st.ImportID); gerr == nil {
				if v, ok := importsNum(r.Get("import.receivedBytes")); ok {
					off = v
				}
			}
			continue
		case err != nil:
			return fmt.Errorf("upload import %s at byte %d: %w", st.ImportID, off, err)
		}
		mismatches, failures = 0, 0
		off = got
		p.prog.Uploaded(off, st.SizeBytes)
		p.chunks++
		if importsStopAfterChunksForTests > 0 && p.chunks == importsStopAfterChunksForTests && p.interrupt != nil {
			p.interrupt()
		}
	}
	p.prog.Stop()
	r, err := p.call(ctx, "POST", apiPath(importsPath, st.ImportID, "complete"), nil)
	if ctx.Err() != nil {
		return p.interrupted(st)
	}
	if err != nil {
		p.say("import %s is uploaded, but the server did not start its restore.\nOnce that is fixed, run the same "+
			"command again (or: sandboxctl imports resume %s) to ask again.", st.ImportID, st.ImportID)
		return fmt.Errorf("complete import %s: %w", st.ImportID, err)
	}
	st.dropArchive()
	into := "a new site"
	if s := r.Str("import.siteId"); s != "" {
		into = "site " + s
	}
	p.say("import %s uploaded; restoring it into %s", st.ImportID, into)
	if p.opts.noWait {
		st.remove()
		r, err := p.get(ctx, st.ImportID)
		if err != nil {
			return err
		}
		if p.e.json {
			return p.e.printJSON(r)
		}
		fmt.Fprintf(p.e.stdout, "import %s is %s; follow it with: sandboxctl imports get %s\n", st.ImportID, r.Str("import.status"), st.ImportID)
		return nil
	}
	return p.wait(ctx, st)
}

// put sends one chunk and returns the bytes the server holds after it.
func (p *importsPusher) put(ctx context.Context, id string, off int64, body io.Reader, n int64) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "PUT", p.c.Base+apiPath(importsPath, id, "upload"), body)
	if err != nil {
		return 0, err
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Service-Offset", strconv.FormatInt(off, 10))
	if p.c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.c.Token)
	}
	if p.c.Workspace != "" {
		req.Header.Set("X-Service-Workspace", p.c.Workspace)
	}
	resp, err := p.up.Do(req)
	if err != nil {
		return 0, fmt.Errorf("PUT chunk at %d: %w", off, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("PUT chunk at %d: read the answer: %w", off, err)
	}
	r := &apiclient.Response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(raw, &r.Body)
	}
	if err := r.Err(); err != nil {
		return 0, err
	}
	got, ok := importsNum(r.Get("receivedBytes"))
	if !ok {
		return 0, fmt.Errorf("PUT chunk at %d: the answer has no receivedBytes: %.200s", off, raw)
	}
	return got, nil
}

// interrupted tells how to go on after a stopped upload; the state stays.
func (p *importsPusher) interrupted(st *importsState) error {
	p.prog.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held := ""
	if r, err := p.c.Call(ctx, "GET", apiPath(importsPath, st.ImportID), nil); err == nil {
		if r.Str("import.status") == "restoring" {
			p.say("interrupted: import %s is uploaded and restoring.\nTo wait for it, run the same command again, or: sandboxctl imports resume %s",
				st.ImportID, st.ImportID)
			return importsInterrupted{"while the restore started"}
		}
		if v, ok := importsNum(r.Get("import.receivedBytes")); ok {
			held = fmt.Sprintf(" (the server holds %s of %s)", byteSize(v), byteSize(st.SizeBytes))
		}
	}
	p.say("interrupted: import %s is paused%s.\nTo go on from there, run the same command again, or: sandboxctl imports resume %s\n"+
		"To drop it: sandboxctl imports cancel %s", st.ImportID, held, st.ImportID, st.ImportID)
	return importsInterrupted{"during the upload"}
}

// wait follows the restore to its end and prints the site.
func (p *importsPusher) wait(ctx context.Context, st *importsState) error {
	// A large restore may take long, but one that shows no progress for
	// waitLimit is not waited for any more (it goes on on the server).
	last, moved := "", time.Now()
	for {
		r, err := p.get(ctx, st.ImportID)
		if ctx.Err() != nil {
			p.prog.Stop()
			p.say("interrupted: import %s goes on restoring on the server.\nTo wait for it again: sandboxctl imports resume %s "+
				"(or the same command); to see it: sandboxctl imports get %s", st.ImportID, st.ImportID, st.ImportID)
			return importsInterrupted{"while waiting for the restore"}
		}
		if err != nil {
			return fmt.Errorf("read import %s: %w", st.ImportID, err)
		}
		status := r.Str("import.status")
		pct, _ := importsNum(r.Get("progress.percent"))
		if phase := r.Str("progress.phase"); phase != "" && status == "restoring" {
			p.prog.Restore(phase, int(pct))
		}
		if now := status + "/" + r.Str("progress.phase") + "/" + fmt.Sprint(pct); now != last {
			last, moved = now, time.Now()
		} else if time.Since(moved) > waitLimit {
			p.prog.Stop()
			return fmt.Errorf("import %s has shown no progress for %s (still %s): see sandboxctl imports get %s", st.ImportID, waitLimit, status, st.ImportID)
		}
		switch status {
		case "ready":
			p.prog.Restore("done", 100)
			p.prog.Stop()
			st.remove()
			return p.printReady(r)
		case "failed", "cancelled", "site_deleted":
			p.prog.Stop()
			st.remove()
			if p.e.json {
				if err := p.e.printJSON(r); err != nil {
					return err
				}
			}
			return p.failure(ctx, r)
		}
		select {
		case <-ctx.Done():
		case <-time.After(importsPollInterval):
		}
	}
}

func (p *importsPusher) printReady(r *apiclient.Response) error {
	if p.e.json {
		return p.e.printJSON(r)
	}
	fmt.Fprintf(p.e.stdout, "import %s is ready: site %s at %s\n", r.Str("import.id"), r.Str("import.siteId"), r.Str("siteUrl"))
	if l := r.Str("loginUrl"); l != "" {
		fmt.Fprintf(p.e.stdout, "log in (one-time link): %s\n", l)
	}
	return nil
}

// failure is an import that ended without a site, as an API error: the
// restore job's error when it has one.
func (p *importsPusher) failure(ctx context.Context, r *apiclient.Response) error {
	id, status := r.Str("import.id"), r.Str("import.status")
	if job := r.Str("import.jobId"); job != "" && status == "failed" {
		if jr, err := p.call(ctx, "GET", "/api/app/jobs/"+url.PathEscape(job), nil); err == nil && jr.Str("job.error.code") != "" {
			return &apiclient.Error{Status: 200, Code: jr.Str("job.error.code"), Message: "import " + id + ": " + jr.Str("job.error.message")}
		}
	}
	msg := "import " + id + " is " + status
	if why := r.Str("import.failureReason"); why != "" {
		msg += ": " + why
	}
	return &apiclient.Error{Status: 200, Code: "import_" + status, Message: msg}
}

// importsSendReader reports the bytes of a chunk as they go out.
type importsSendReader struct {
	r         io.Reader
	at, total int64
	prog      importsProgress
}

func (s *importsSendReader) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	s.at += int64(n)
	s.prog.Sending(s.at, s.total)
	return n, err
}

// importsRateReader holds reads to the limiter's rate.
type importsRateReader struct {
	ctx context.Context
	r   io.Reader
	lim *rate.Limiter
}

func (l *importsRateReader) Read(b []byte) (int, error) {
	if len(b) > l.lim.Burst() {
		b = b[:l.lim.Burst()]
	}
	n, err := l.r.Read(b)
	if n > 0 {
		if werr := l.lim.WaitN(l.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}
