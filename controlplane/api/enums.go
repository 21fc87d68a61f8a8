package api

import (
	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/domainspec"
	"github.com/sandboxd/sandboxd/controlplane/importspec"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/controlplane/repospec"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templatespec"
	"github.com/sandboxd/sandboxd/controlplane/webhookspec"
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
		"importPhase":          importspec.Phases,
		"importObjectKind":     {importspec.KindArchive, importspec.KindSQL},
		"multipartMode":        {importspec.ModeDirect, importspec.ModeLocal},
		"domainStatus":         state.DomainStatuses,
		"dnsRecordType":        domainspec.RecordTypes,
		"deliveryStatus":       state.DeliveryStatuses,
		"plan":                 state.Plans,
		"role":                 state.Roles,
		"invitationStatus":     state.InvitationStatuses,
		"tokenKind":            state.TokenKinds,
		"memberRole":           {string(pki.RoleAgent), string(pki.RoleEdge), string(pki.RoleServer)},
		"librarySource":        {libraryspec.SourceUpload, libraryspec.SourceGitHub},
		"pluginKind":           sitespec.PluginKinds,
		"fileEntryType":        sitespec.FileEntryTypes,
		"repoDestination":      repospec.Destinations,
		"repoAuthKind":         repospec.AuthKinds,
		"launchQuotaMode":      templatespec.QuotaModes,
		"launchEntryMode":      templatespec.EntryModes,
		"launchExpirationMode": templatespec.ExpirationModes,
		"webhookEvent":         webhookspec.Events,
		"webhookDemoStatus":    webhookspec.DemoStatus,
		"webhookSource":        webhookspec.SourceKinds,
		"findingSeverity":      blueprint.Severities,
	}
}
