package state

// The closed sets of the values above, in the order clients read them.
// The API's document takes its enums from these (api.Enums), so a value
// added to a const block must be added here too: TestEnumSetsHoldEveryConstant
// parses this package and fails when one is missing.
var (
	// Plans is every plan an account can be on.
	Plans = []string{PlanFree, PlanPaid}
	// Roles is every workspace member role.
	Roles = []string{RoleOwner, RoleMember}
	// InvitationStatuses is what an invitation can be; expired is derived
	// from ExpiresAt when it is read.
	InvitationStatuses = []string{InvitationPending, InvitationAccepted, InvitationExpired}
	// JobStatuses is every job status.
	JobStatuses = []string{JobQueued, JobRunning, JobSucceeded, JobFailed}
	// SiteStatuses is every site status.
	SiteStatuses = []string{SiteCreating, SiteReady, SiteFailed, SiteDeleting, SiteUnavailable}
	// NodeStatuses is every node status.
	NodeStatuses = []string{NodeReady, NodeDown}
	// TemplateStatuses is every template status.
	TemplateStatuses = []string{TemplateBuilding, TemplateReady, TemplateFailed}
	// RunStatuses is every Blueprint run status.
	RunStatuses = []string{RunPending, RunRunning, RunSucceeded, RunFailed}
	// StepStatuses is every status of a run's step.
	StepStatuses = []string{RunPending, RunRunning, RunSucceeded, RunFailed, StepSkipped}
	// RunModes is every Blueprint run mode.
	RunModes = []string{RunCreate, RunApply, RunBake}
	// ImportStatuses is every import status.
	ImportStatuses = []string{ImportAwaitingUpload, ImportUploading, ImportRestoring, ImportReady, ImportFailed, ImportCancelled, ImportSiteDeleted}
	// ImportSourceKinds is every import source kind.
	ImportSourceKinds = []string{ImportRemotePlugin, ImportArchive}
	// DomainStatuses is every custom domain status.
	DomainStatuses = []string{DomainPendingDNS, DomainVerifying, DomainActive, DomainFailed}
	// DeliveryStatuses is what a delivery shows once attempted (queued is
	// never shown).
	DeliveryStatuses = []string{DeliveryDelivered, DeliveryRetrying, DeliveryFailed}
	// TokenKinds is every API token kind.
	TokenKinds = []string{TokenPersonal, TokenOAuth}
)
