package library

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

var repoRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)

// ParseRepository accepts owner/name or a https://github.com/owner/name URL.
func ParseRepository(s string) (string, error) {
	s = strings.TrimSpace(s)
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if u.Scheme != "https" || !strings.EqualFold(u.Host, "github.com") {
			return "", errors.New("repository must be owner/name or https://github.com/owner/name")
		}
		s = strings.Trim(u.Path, "/")
		s = strings.TrimSuffix(s, ".git")
	}
	if !repoRE.MatchString(s) || strings.Contains(s, "..") {
		return "", errors.New("repository must be owner/name")
	}
	return s, nil
}

// release is the part of a code host's latest release the Library uses.
type release struct {
	tag, asset string
}

// maxReleaseAnswer bounds the code host's JSON answer.
const maxReleaseAnswer = 4 << 20

// latestRelease asks the code host's releases API for the repository's
// latest release and downloads its first .zip asset.
func (s *Service) latestRelease(ctx context.Context, repo string) (*release, []byte, error) {
	base := strings.TrimRight(s.cfg.GitHubAPI, "/")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/repos/"+repo+"/releases/latest", nil)
	if err != nil {
		return nil, nil, err
	}
	hreq.Header.Set("Accept", "application/vnd.github+json")
	hreq.Header.Set("User-Agent", "sandboxd")
	resp, err := s.cfg.GitHubHTTP.Do(hreq)
	if err != nil {
		return nil, nil, apierr.Unavailable("the code host did not answer: %v", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil, apierr.Invalid("repository", "%s has no published release (or does not exist)", repo)
	case resp.StatusCode != http.StatusOK:
		return nil, nil, apierr.Unavailable("the code host answered %s", resp.Status)
	}
	var body struct {
		TagName string `json:"tag_name"`
		Assets  []struct {
			Name string `json:"name"`
			URL  string `json:"browser_download_url"`
			Size int64  `json:"size"`
		} `json:"assets"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, maxReleaseAnswer)).Decode(&body); err != nil {
		return nil, nil, apierr.Unavailable("the code host's release answer is unreadable: %v", err)
	}
	for _, as := range body.Assets {
		if !strings.HasSuffix(strings.ToLower(as.Name), ".zip") {
			continue
		}
		if as.Size > libraryspec.MaxZipBytes {
			return nil, nil, apierr.Invalid("repository", "the release asset %s is %d bytes; the limit is %d", as.Name, as.Size, libraryspec.MaxZipBytes)
		}
		zip, err := s.cfg.Fetch.Get(ctx, as.URL, libraryspec.MaxZipBytes, nil)
		if err != nil {
			return nil, nil, apierr.Invalid("repository", "downloading %s: %v", as.Name, err)
		}
		return &release{tag: body.TagName, asset: path.Base(as.Name)}, zip, nil
	}
	return nil, nil, apierr.Invalid("repository", "the latest release of %s (%s) has no .zip asset", repo, body.TagName)
}
