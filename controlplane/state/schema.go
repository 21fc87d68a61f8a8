package state

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"
)

// Table names.
const (
	tableAccounts     = "accounts"
	tableWorkspaces   = "workspaces"
	tableMembers      = "members"
	tableRoles        = "roles"
	tableTokens       = "tokens"
	tableInvitations  = "invitations"
	tableJobs         = "jobs"
	tableServers      = "servers"
	tableOutbox       = "outbox"
	tableSites        = "sites"
	tableNodes        = "nodes"
	tableLibrary      = "library"
	tableIdempotency  = "idempotency"
	tableTemplates    = "templates"
	tableLeads        = "leads"
	tableDemos        = "demos"
	tableWebhooks     = "webhooks"
	tableDeliveries   = "deliveries"
	tableBlueprints   = "blueprints"
	tableRuns         = "blueprint_runs"
	tableImports      = "imports"
	tableOAuthClients = "oauth_clients"
	tableOAuthCodes   = "oauth_codes"
	tableDomains      = "domains"
	tableCertData     = "cert_data"
	tableCertLocks    = "cert_locks"
	tableCertOrders   = "cert_orders"
	tableSSHKeys      = "ssh_keys"
	tableRepos        = "repositories"
	tableCheckpoints  = "checkpoints"
	// The cluster's own credentials.
	tableClusterCA      = "cluster_ca"
	tableClusterMembers = "cluster_members"
	tableJoinTokens     = "join_tokens"
	tableOperatorTokens = "operator_tokens"
	tableSnapshots      = "snapshots"
	tableTombstones     = "tombstones"
)

func idIndex() *memdb.IndexSchema {
	return &memdb.IndexSchema{Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "ID"}}
}

func fieldIndex(name, field string, unique bool) *memdb.IndexSchema {
	return &memdb.IndexSchema{Name: name, Unique: unique, Indexer: &memdb.StringFieldIndex{Field: field}}
}

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableAccounts: {Name: tableAccounts, Indexes: map[string]*memdb.IndexSchema{
			"id":    idIndex(),
			"email": {Name: "email", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Email", Lowercase: true}},
		}},
		tableWorkspaces: {Name: tableWorkspaces, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
		}},
		tableMembers: {Name: tableMembers, Indexes: map[string]*memdb.IndexSchema{
			"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
				&memdb.StringFieldIndex{Field: "WorkspaceID"}, &memdb.StringFieldIndex{Field: "UserID"},
			}}},
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
			"user":      fieldIndex("user", "UserID", false),
			"role":      {Name: "role", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "CustomRoleID"}},
		}},
		tableRoles: {Name: tableRoles, Indexes: map[string]*memdb.IndexSchema{
			"id":        idIndex(),
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
		}},
		tableTokens: {Name: tableTokens, Indexes: map[string]*memdb.IndexSchema{
			"id":   idIndex(),
			"hash": fieldIndex("hash", "Hash", true),
			"user": fieldIndex("user", "UserID", false),
		}},
		tableInvitations: {Name: tableInvitations, Indexes: map[string]*memdb.IndexSchema{
			"id":        idIndex(),
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
			"email":     {Name: "email", Indexer: &memdb.StringFieldIndex{Field: "Email", Lowercase: true}},
		}},
		tableJobs: {Name: tableJobs, Indexes: map[string]*memdb.IndexSchema{
			"id":     idIndex(),
			"status": fieldIndex("status", "Status", false),
		}},
		tableServers: {Name: tableServers, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
		}},
		tableOutbox: {Name: tableOutbox, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
		}},
		tableSites: {Name: tableSites, Indexes: map[string]*memdb.IndexSchema{
			"id":        idIndex(),
			"slug":      fieldIndex("slug", "Slug", true),
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
			"user":      fieldIndex("user", "UserID", false),
			"node":      {Name: "node", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "NodeID"}},
		}},
		tableNodes: {Name: tableNodes, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
		}},
		tableLibrary: {Name: tableLibrary, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
			"slug": {Name: "slug", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
				&memdb.StringFieldIndex{Field: "WorkspaceID"}, &memdb.StringFieldIndex{Field: "Slug"},
			}}},
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
			"blob":      fieldIndex("blob", "BlobSHA256", false),
		}},
		tableIdempotency: {Name: tableIdempotency, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
		}},
		tableTemplates: {Name: tableTemplates, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
			"slug": {Name: "slug", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
				&memdb.StringFieldIndex{Field: "WorkspaceID"}, &memdb.StringFieldIndex{Field: "Slug"},
			}}},
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
			"user":      fieldIndex("user", "UserID", false),
			"launch":    {Name: "launch", Unique: true, AllowMissing: true, Indexer: launchTokenIndex{}},
		}},
		tableLeads: {Name: tableLeads, Indexes: map[string]*memdb.IndexSchema{
			"id":       idIndex(),
			"template": fieldIndex("template", "TemplateID", false),
		}},
		tableBlueprints: {Name: tableBlueprints, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
			"slug": {Name: "slug", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
				&memdb.StringFieldIndex{Field: "WorkspaceID"}, &memdb.StringFieldIndex{Field: "Slug"},
			}}},
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
			"user":      fieldIndex("user", "UserID", false),
		}},
		tableRuns: {Name: tableRuns, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
			// A source applied without saving has no Blueprint.
			"blueprint": {Name: "blueprint", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "BlueprintID"}},
		}},
		tableImports: {Name: tableImports, Indexes: map[string]*memdb.IndexSchema{
			"id":        idIndex(),
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
			"site":      {Name: "site", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "SiteID"}},
		}},
		tableOAuthClients: {Name: tableOAuthClients, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
		}},
		tableOAuthCodes: {Name: tableOAuthCodes, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
		}},
		tableDomains: {Name: tableDomains, Indexes: map[string]*memdb.IndexSchema{
			"id":       {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "SiteID"}},
			"hostname": fieldIndex("hostname", "Hostname", true),
		}},
		tableCertData: {Name: tableCertData, Indexes: map[string]*memdb.IndexSchema{
			"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Key"}},
		}},
		tableCertLocks: {Name: tableCertLocks, Indexes: map[string]*memdb.IndexSchema{
			"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
		}},
		tableCertOrders: {Name: tableCertOrders, Indexes: map[string]*memdb.IndexSchema{
			"id": idIndex(),
		}},
		tableSSHKeys: {Name: tableSSHKeys, Indexes: map[string]*memdb.IndexSchema{
			"id":          idIndex(),
			"user":        fieldIndex("user", "UserID", false),
			"fingerprint": fieldIndex("fingerprint", "Fingerprint", true),
		}},
		tableRepos: {Name: tableRepos, Indexes: map[string]*memdb.IndexSchema{
			"id":   idIndex(),
			"site": fieldIndex("site", "SiteID", false),
		}},
		tableCheckpoints: {Name: tableCheckpoints, Indexes: map[string]*memdb.IndexSchema{
			"id":   idIndex(),
			"site": fieldIndex("site", "SiteID", false),
		}},
		tableClusterCA:      {Name: tableClusterCA, Indexes: map[string]*memdb.IndexSchema{"id": idIndex()}},
		tableClusterMembers: {Name: tableClusterMembers, Indexes: map[string]*memdb.IndexSchema{"id": idIndex()}},
		tableJoinTokens:     {Name: tableJoinTokens, Indexes: map[string]*memdb.IndexSchema{"id": idIndex()}},
		tableOperatorTokens: {Name: tableOperatorTokens, Indexes: map[string]*memdb.IndexSchema{
			"id":   idIndex(),
			"hash": fieldIndex("hash", "Hash", true),
		}},
		tableTombstones: {Name: tableTombstones, Indexes: map[string]*memdb.IndexSchema{"id": idIndex()}},
		tableSnapshots: {Name: tableSnapshots, Indexes: map[string]*memdb.IndexSchema{
			"id":   idIndex(),
			"site": fieldIndex("site", "SiteID", false),
		}},
		tableDemos: {Name: tableDemos, Indexes: map[string]*memdb.IndexSchema{
			"id":       idIndex(),
			"template": fieldIndex("template", "TemplateID", false),
		}},
		tableWebhooks: {Name: tableWebhooks, Indexes: map[string]*memdb.IndexSchema{
			"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "WorkspaceID"}},
		}},
		tableDeliveries: {Name: tableDeliveries, Indexes: map[string]*memdb.IndexSchema{
			"id":        idIndex(),
			"workspace": fieldIndex("workspace", "WorkspaceID", false),
			"done":      {Name: "done", Indexer: &memdb.BoolFieldIndex{Field: "Done"}},
		}},
	}}
}

// launchTokenIndex indexes templates by their launch token (those with
// one), so the public launcher finds a template without a scan.
type launchTokenIndex struct{}

func (launchTokenIndex) FromObject(obj any) (bool, []byte, error) {
	t, ok := obj.(*Template)
	if !ok {
		return false, nil, fmt.Errorf("launch index: %T is not a template", obj)
	}
	if t.Launch.Token == "" {
		return false, nil, nil
	}
	return true, []byte(t.Launch.Token + "\x00"), nil
}

func (launchTokenIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("launch index: one argument, got %d", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("launch index: %T is not a string", args[0])
	}
	return []byte(s + "\x00"), nil
}

// tables lists every table in snapshot order: parents before children so
// a restore can be checked row by row.
var tables = []string{
	tableAccounts, tableWorkspaces, tableRoles, tableMembers, tableTokens,
	tableInvitations, tableJobs, tableServers, tableOutbox, tableNodes, tableSites, tableLibrary, tableIdempotency,
	tableTemplates, tableLeads, tableDemos, tableWebhooks, tableDeliveries, tableBlueprints, tableRuns,
	tableImports, tableOAuthClients, tableOAuthCodes, tableDomains, tableCertData, tableCertLocks, tableCertOrders, tableSSHKeys, tableRepos, tableCheckpoints,
	tableClusterCA, tableClusterMembers, tableJoinTokens, tableOperatorTokens, tableSnapshots, tableTombstones,
}
