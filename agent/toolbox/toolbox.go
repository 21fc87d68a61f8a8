// Package toolbox is what a site's owner works with once the site runs:
// its files, WordPress's debug constants and log, captured mail, PHP
// version and php.ini, plugins and themes (uploaded or placed from Git),
// and Blueprint steps. Everything runs inside the site's container as
// the site's user, through the lifecycle core (agent/sites), or reads
// the site's files without following what the site planted.
package toolbox

import "github.com/sandboxd/sandboxd/agent/sites"

// Box is the toolbox of a node's sites.
type Box struct {
	sites *sites.Manager
}

// New makes the toolbox over a node's sites.
func New(m *sites.Manager) *Box { return &Box{sites: m} }
