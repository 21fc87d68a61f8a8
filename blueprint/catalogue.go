package blueprint

// resourceKind is what a step property holds: a file resource, a
// directory resource, or either.
type resourceKind int

const (
	fileResource resourceKind = iota + 1
	dirResource
	fileOrDirResource
)

// stepSpec is one step of the v1 catalogue: the properties it takes
// (beside step and progress), those it needs, which hold resources, and
// whether this service runs it.
type stepSpec struct {
	keys      []string
	required  []string
	resources map[string]resourceKind
	// unsupported, when set, says why the runner cannot do the step.
	unsupported string
	// deprecated maps an old property name to the one that replaced it.
	deprecated map[string]string
}

// steps is the catalogue of Playground's Blueprint v1 steps (schema
// 3.1.56); TestCatalogueMatchesSchema keeps it equal to the schema.
var steps = map[string]stepSpec{
	"activatePlugin":       {keys: []string{"pluginPath", "pluginName"}, required: []string{"pluginPath"}},
	"activateTheme":        {keys: []string{"themeFolderName"}, required: []string{"themeFolderName"}},
	"cp":                   {keys: []string{"fromPath", "toPath"}, required: []string{"fromPath", "toPath"}},
	"defineWpConfigConsts": {keys: []string{"consts", "method", "virtualize"}, required: []string{"consts"}},
	"defineSiteUrl": {keys: []string{"siteUrl"}, required: []string{"siteUrl"},
		unsupported: "a sandbox's URL is given by the service (its slug, or a custom domain)"},
	"enableMultisite": {keys: []string{"wpCliPath"},
		unsupported: "sandboxes are single sites; multisite is not available"},
	"importWxr": {keys: []string{"file", "fetchAttachments", "rewriteUrls", "urlMapping", "importComments", "defaultAuthorUsername",
		"authorsMode", "authorsMap", "importUsers", "importer"}, required: []string{"file"}, resources: map[string]resourceKind{"file": fileResource}},
	"importThemeStarterContent": {keys: []string{"themeSlug"}},
	"importWordPressFiles": {keys: []string{"wordPressFilesZip", "pathInZip"}, required: []string{"wordPressFilesZip"},
		resources:   map[string]resourceKind{"wordPressFilesZip": fileResource},
		unsupported: "replacing a sandbox's WordPress files is done by an Import, not a Blueprint step"},
	"installPlugin": {keys: []string{"ifAlreadyInstalled", "pluginData", "pluginZipFile", "options"}, required: []string{"pluginData"},
		resources:  map[string]resourceKind{"pluginData": fileOrDirResource, "pluginZipFile": fileResource},
		deprecated: map[string]string{"pluginZipFile": "pluginData"}},
	"installTheme": {keys: []string{"ifAlreadyInstalled", "themeData", "themeZipFile", "options"}, required: []string{"themeData"},
		resources:  map[string]resourceKind{"themeData": fileOrDirResource, "themeZipFile": fileResource},
		deprecated: map[string]string{"themeZipFile": "themeData"}},
	"login":             {keys: []string{"username", "password"}},
	"mkdir":             {keys: []string{"path"}, required: []string{"path"}},
	"mv":                {keys: []string{"fromPath", "toPath"}, required: []string{"fromPath", "toPath"}},
	"resetData":         {keys: []string{"contentTypes"}},
	"request":           {keys: []string{"request"}, required: []string{"request"}},
	"rm":                {keys: []string{"path"}, required: []string{"path"}},
	"rmdir":             {keys: []string{"path"}, required: []string{"path"}},
	"runPHP":            {keys: []string{"code"}, required: []string{"code"}, resources: map[string]resourceKind{"code": fileResource}},
	"runPHPWithOptions": {keys: []string{"options"}, required: []string{"options"}},
	"runWpInstallationWizard": {keys: []string{"options"}, required: []string{"options"},
		unsupported: "sandboxes come installed; add or change users with wp-cli user create/update or updateUserMeta"},
	"runSql":         {keys: []string{"sql"}, required: []string{"sql"}, resources: map[string]resourceKind{"sql": fileResource}},
	"setSiteOptions": {keys: []string{"options"}, required: []string{"options"}},
	"unzip": {keys: []string{"zipFile", "zipPath", "extractToPath"}, required: []string{"extractToPath"},
		resources: map[string]resourceKind{"zipFile": fileResource}},
	"updateUserMeta":  {keys: []string{"meta", "userId"}, required: []string{"meta", "userId"}},
	"writeFile":       {keys: []string{"path", "data"}, required: []string{"data", "path"}, resources: map[string]resourceKind{"data": fileResource}},
	"writeFiles":      {keys: []string{"writeToPath", "filesTree"}, required: []string{"filesTree", "writeToPath"}, resources: map[string]resourceKind{"filesTree": dirResource}},
	"wp-cli":          {keys: []string{"command", "wpCliPath"}, required: []string{"command"}},
	"setSiteLanguage": {keys: []string{"language"}, required: []string{"language"}},
}

// fileResources and dirResources are the resource types and the
// properties each takes (required first).
var (
	fileResources = map[string]resourceSpec{
		"vfs":                   {required: []string{"path"}},
		"literal":               {required: []string{"name", "contents"}},
		"wordpress.org/themes":  {required: []string{"slug"}},
		"wordpress.org/plugins": {required: []string{"slug"}},
		"url":                   {required: []string{"url"}, optional: []string{"caption"}},
		"bundled":               {required: []string{"path"}},
		"zip":                   {required: []string{"inner"}, optional: []string{"name"}},
	}
	dirResources = map[string]resourceSpec{
		"git:directory":     {required: []string{"url", "ref"}, optional: []string{"refType", "path", ".git"}},
		"literal:directory": {required: []string{"files", "name"}},
	}
)

// resourceSpec is one resource type's properties.
type resourceSpec struct {
	required, optional []string
}

// topLevel are the v1 declaration's properties.
var topLevel = []string{"landingPage", "description", "meta", "preferredVersions", "features", "extraLibraries", "constants",
	"plugins", "siteOptions", "login", "phpExtensionBundles", "steps", "$schema"}

// wpCLICommands are the WP-CLI commands the runner does itself, through
// WordPress's own functions (no WP-CLI build reaches this machine): the
// command and, where it matters, its subcommand.
var wpCLICommands = map[string][]string{
	"post":           {"create", "generate"},
	"media":          {"import"},
	"site":           {"empty"},
	"option":         {"get", "update", "add", "delete"},
	"user":           {"create", "update", "meta"},
	"plugin":         {"install", "activate", "deactivate"},
	"theme":          {"install", "activate"},
	"rewrite":        {"structure", "flush"},
	"search-replace": nil,
}

// reservedConsts are the wp-config constants the service defines itself;
// a Blueprint cannot change them.
var reservedConsts = []string{"DB_NAME", "DB_USER", "DB_PASSWORD", "DB_HOST", "DB_CHARSET", "DB_COLLATE",
	"AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY", "AUTH_SALT", "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT",
	"WP_HOME", "WP_SITEURL", "ABSPATH", "WP_HTTP_BLOCK_EXTERNAL", "AUTOMATIC_UPDATER_DISABLED", "WP_AUTO_UPDATE_CORE", "FS_METHOD"}
