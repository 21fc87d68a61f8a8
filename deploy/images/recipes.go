package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Recipe is one runtime image: a Debian suite and the packages installed
// into it. Everything sandbox-specific (web server config, install
// script, mu-plugin) is written by the agent into each site, so images
// hold Debian packages only and rarely need a rebuild.
type Recipe struct {
	// Name is the catalogue key: "php-8.2" or "mariadb".
	Name string `json:"name"`
	// Ref is the image reference the agent runs.
	Ref string `json:"ref"`
	// PHPVersion is set for PHP runtimes.
	PHPVersion string   `json:"phpVersion,omitempty"`
	Suite      string   `json:"suite"`
	Packages   []string `json:"packages"`
	// Links are symlinks made in the image (path → target): PHP images
	// give /wordpress, the path Playground Blueprints use, as the site's
	// WordPress directory.
	Links map[string]string `json:"links,omitempty"`
}

// formatVersion changes whenever the way images are assembled changes, so
// the recipe hash (and with it the cache) moves too.
const formatVersion = 1

// Hash identifies what the recipe builds; a cached image with the same
// hash is reused.
func (r Recipe) Hash() string {
	b, _ := json.Marshal(struct {
		Format int
		Recipe
		Excludes []string
	}{formatVersion, r, pathExcludes})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// pathExcludes keep documentation and translations out of the images.
var pathExcludes = []string{
	"/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*",
	"/usr/share/lintian/*",
}

func php(version, suite string, extra ...string) Recipe {
	mod := "libapache2-mod-php" + version
	pkgs := []string{"apache2", mod, "wordpress", "adminer", "mariadb-client", "curl", "ca-certificates"}
	for _, ext := range []string{"mysql", "xml", "mbstring", "curl", "zip", "gd", "intl", "cli", "opcache"} {
		pkgs = append(pkgs, "php"+version+"-"+ext)
	}
	return Recipe{Name: "php-" + version, Ref: "sandboxd.local/php:" + version, PHPVersion: version, Suite: suite,
		Packages: append(pkgs, extra...), Links: map[string]string{"/wordpress": "/srv/site/wordpress"}}
}

// Recipes are every image this project builds. Debian ships PHP 7.4 in
// bullseye, 8.2 in bookworm and 8.4 in trixie, each with its suite's
// WordPress (5.7, 6.1, 6.8) and default theme.
var Recipes = []Recipe{
	php("8.2", "bookworm", "wordpress-theme-twentytwentythree"),
	php("7.4", "bullseye", "wordpress-theme-twentytwentyone"),
	php("8.4", "trixie", "wordpress-theme-twentytwentyfive"),
	{Name: "mariadb", Ref: "sandboxd.local/mariadb:10", Suite: "bookworm", Packages: []string{"mariadb-server"}},
}
