package api

import (
	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/domains"
	"github.com/sandboxd/sandboxd/controlplane/imports"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/library"
	"github.com/sandboxd/sandboxd/controlplane/repos"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templates"
	"github.com/sandboxd/sandboxd/controlplane/webhooks"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// Enums are the value sets the document's `enum:"@name"` tags name, each
// taken from the package that owns the values, so that the document and
// the answers cannot drift apart (a job type added to jobspec.Types is in
// the document at once).
func Enums() map[string][]string {
	return map[string][]string{
		"jobType":              jobspec.Types,
		"jobStatus":            state.JobStatuses,
		"siteStatus":           state.SiteStatuses,
		"nodeStatus":           state.NodeStatuses,
		"templateStatus":       state.TemplateStatuses,
		"runStatus":            state.RunStatuses,
		"stepStatus":           state.StepStatuses,
		"runMode":              state.RunModes,
		"importStatus":         state.ImportStatuses,
		"importSourceKind":     state.ImportSourceKinds,
		"importPhase":          imports.Phases,
		"importObjectKind":     {imports.KindArchive, imports.KindSQL},
		"multipartMode":        {imports.ModeDirect, imports.ModeLocal},
		"domainStatus":         state.DomainStatuses,
		"dnsRecordType":        domains.RecordTypes,
		"deliveryStatus":       state.DeliveryStatuses,
		"plan":                 state.Plans,
		"role":                 state.Roles,
		"invitationStatus":     state.InvitationStatuses,
		"tokenKind":            state.TokenKinds,
		"memberRole":           {string(pki.RoleAgent), string(pki.RoleEdge), string(pki.RoleServer)},
		"librarySource":        {library.SourceUpload, library.SourceGitHub},
		"pluginKind":           sitespec.PluginKinds,
		"fileEntryType":        sitespec.FileEntryTypes,
		"repoDestination":      repos.Destinations,
		"repoAuthKind":         repos.AuthKinds,
		"launchQuotaMode":      templates.QuotaModes,
		"launchEntryMode":      templates.EntryModes,
		"launchExpirationMode": templates.ExpirationModes,
		"webhookEvent":         webhooks.Events,
		"webhookDemoStatus":    webhooks.DemoStatus,
		"webhookSource":        webhooks.SourceKinds,
		"findingSeverity":      blueprint.Severities,
	}
}
