package e2e

import (
	"bytes"
	"image"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// bannerGreen is a must-use plugin that puts a green band across the top
// of every front-end page.
const bannerGreen = `<?php
add_action('wp_body_open', function () { echo '<div id="e2e-band" style="position:fixed;top:0;left:0;right:0;height:120px;background:#00ff00;z-index:99999"></div>'; });
add_action('wp_footer', function () { echo '<div id="e2e-band2" style="position:fixed;top:0;left:0;right:0;height:120px;background:#00ff00;z-index:99999"></div>'; });
`

// neverLoads is a page whose image never arrives.
const neverLoads = `<?php
if (isset($_GET['img'])) { sleep(55); exit; }
echo '<html><body style="margin:0;background:#0000ff"><img src="/never.php?img=1"></body></html>';
`

// fetchPNG downloads a screenshot's URL, without credentials, and
// decodes it.
func fetchPNG(t *testing.T, url string) (image.Image, *http.Response) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, resp
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: not a PNG: %v", url, err)
	}
	return img, resp
}

// rgb is a pixel's colour in 8 bits a channel.
func rgb(img image.Image, x, y int) (r, g, b uint32) {
	r, g, b, _ = img.At(x, y).RGBA()
	return r >> 8, g >> 8, b >> 8
}

// TestScreenshotsEndToEnd: a site's page is taken by its node's browser
// and the picture, fetched by its short-lived URL with no credentials,
// shows what the site's plugin draws; signed in, wp-admin shows (its dark
// admin bar), signed out the login page; a page that never finishes
// loading is taken at the bound; a tampered URL, bad input and another
// workspace's site are refused.
func TestScreenshotsEndToEnd(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	other := sharedDev(t)
	site := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Pictured"}).Must(t, 202)
	id := site.Str("site.id")
	if job := d.waitJob(t, site.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("site: %v", job)
	}
	d.putFile(t, id, "wp-content/mu-plugins/e2e-band.php", bannerGreen)
	d.putFile(t, id, "never.php", neverLoads)
	shoot := func(body map[string]any) map[string]any {
		t.Helper()
		return d.owner.Do("POST", "/api/app/sites/"+id+"/screenshot", body).Must(t, 200).Get("screenshot").(map[string]any)
	}

	shot := shoot(map[string]any{"path": "/", "width": 1024, "height": 700})
	url := shot["url"].(string)
	img, resp := fetchPNG(t, url)
	if img == nil {
		t.Fatalf("the screenshot's URL answered %d", resp.StatusCode)
	}
	if b := img.Bounds(); b.Dx() != 1024 || b.Dy() != 700 || shot["loaded"] != true || resp.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("shot %v: %dx%d %s", shot, b.Dx(), b.Dy(), resp.Header.Get("Content-Type"))
	}
	if r, g, b := rgb(img, 500, 60); r > 40 || g < 200 || b > 40 {
		t.Fatalf("the plugin's green band is not in the picture: (%d,%d,%d) at its place", r, g, b)
	}
	// A tampered or stripped URL shows nothing.
	for _, bad := range []string{strings.Replace(url, "sig=", "sig=0", 1), strings.Split(url, "?")[0],
		strings.Replace(url, "expires=", "expires=9", 1)} {
		if img, resp := fetchPNG(t, bad); img != nil || resp.StatusCode != 404 {
			t.Fatalf("%s answered %d", bad, resp.StatusCode)
		}
	}

	// wp-admin: the login page signed out, the dashboard (its dark admin
	// bar) signed in.
	out, _ := fetchPNG(t, shoot(map[string]any{"path": "/wp-admin/", "width": 1024, "height": 700})["url"].(string))
	in, _ := fetchPNG(t, shoot(map[string]any{"path": "/wp-admin/", "width": 1024, "height": 700, "signedIn": true})["url"].(string))
	if r, g, b := rgb(in, 600, 10); r > 80 || g > 80 || b > 80 {
		t.Fatalf("signed in, the top of wp-admin is (%d,%d,%d): not the admin bar", r, g, b)
	}
	if r, g, b := rgb(out, 600, 10); r < 200 || g < 200 || b < 200 {
		t.Fatalf("signed out, the top of wp-admin is (%d,%d,%d): not the login page", r, g, b)
	}

	slow := shoot(map[string]any{"path": "/never.php", "width": 800, "height": 600})
	if slow["loaded"] != false {
		t.Fatalf("a page that never finishes loading: %v", slow)
	}
	if img, _ := fetchPNG(t, slow["url"].(string)); img == nil {
		t.Fatal("no picture of the page that never finished loading")
	} else if _, _, b := rgb(img, 10, 10); b < 200 {
		t.Fatal("the page that never finished loading is not in its picture")
	}

	for _, body := range []map[string]any{{"path": "https://example.com/"}, {"path": "//example.com/"}, {"width": 10}, {"height": 99999}, {"zoom": 2}} {
		if r := d.owner.Do("POST", "/api/app/sites/"+id+"/screenshot", body); r.Status != 400 || r.Code() != "invalid_request" {
			t.Fatalf("%v: %d %s", body, r.Status, r.Raw)
		}
	}
	if r := other.owner.Do("POST", "/api/app/sites/"+id+"/screenshot", map[string]any{}); r.Status != 404 || r.Code() != "site_not_found" {
		t.Fatalf("another workspace's site: %d %s", r.Status, r.Raw)
	}
	if job := d.waitJob(t, d.owner.Do("DELETE", "/api/app/sites/"+id, nil).Must(t, 202).Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("delete: %v", job)
	}
}
