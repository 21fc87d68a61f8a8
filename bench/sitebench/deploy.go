package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// markerZip is a plugin that prints marker in every page's footer.
func markerZip(marker string) []byte {
	return wpzip.BuildPlugin("bench-marker", "Bench Marker", "1",
		fmt.Sprintf(`add_action('wp_footer', function () { echo '%s'; });`, marker))
}

// waitBody polls a site's home page until it contains marker.
func waitBody(addr, host, marker string, deadline time.Duration) error {
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.Host = host
		if resp, err := client.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(b, []byte(marker)) {
				return nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("%s never showed %q", host, marker)
}

// deployViaAPI uploads a ZIP to POST /api/app/sites/{id}/plugins with
// activate and returns the job id.
func (s *system) deployViaAPI(siteID string, zip []byte) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("activate", "true")
	w, _ := mw.CreateFormFile("file", "bench.zip")
	_, _ = w.Write(zip)
	_ = mw.Close()
	r, err := s.apiClient().Call(context.Background(), "POST", "/api/app/sites/"+siteID+"/plugins", body.Bytes(),
		"Content-Type", mw.FormDataContentType())
	if err != nil {
		return "", fmt.Errorf("deploy: %w", err)
	}
	return r.Str("jobId"), nil
}

// measureDeploys times n plugin deploys until the plugin's output is
// served: through the API, job and edge on one site, and the agent's
// install called directly on another.
func measureDeploys(ctx context.Context, sys *system, mgr *sites.Manager, edgeAddr string, apiSite, baseSite string, n int) (api, base []time.Duration, err error) {
	b := mgr.Get(baseSite)
	bHost := strings.TrimPrefix(b.URL, "http://")
	a := mgr.Get(apiSite)
	aHost := strings.TrimPrefix(a.URL, "http://")
	for i := 0; i < n; i++ {
		marker := fmt.Sprintf("bench-base-%d-%d", i, time.Now().UnixNano())
		t0 := time.Now()
		if _, err := sys.agent.Toolbox().InstallPlugin(ctx, baseSite, markerZip(marker), true); err != nil {
			return nil, nil, err
		}
		if err := waitBody(b.Addr(), bHost, marker, time.Minute); err != nil {
			return nil, nil, err
		}
		base = append(base, time.Since(t0))

		marker = fmt.Sprintf("bench-api-%d-%d", i, time.Now().UnixNano())
		t0 = time.Now()
		if _, err := sys.deployViaAPI(apiSite, markerZip(marker)); err != nil {
			return nil, nil, err
		}
		if err := waitBody(edgeAddr, aHost, marker, time.Minute); err != nil {
			return nil, nil, err
		}
		api = append(api, time.Since(t0))
	}
	return api, base, nil
}
