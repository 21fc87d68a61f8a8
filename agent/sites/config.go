package sites

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
)

// phpModule is how Debian names the Apache PHP module of a version.
func phpModule(version string) (name, file string) {
	if strings.HasPrefix(version, "7.") {
		return "php7_module", "libphp" + version + ".so"
	}
	return "php_module", "libphp" + version + ".so"
}

var apacheConf = template.Must(template.New("apache").Parse(`# Written by the sandbox agent.
ServerRoot "/etc/apache2"
ServerName localhost
# The site's own network namespace: every address in it is the site's.
Listen {{.Port}}
PidFile /srv/site/tmp/apache.pid
Mutex file:/srv/site/tmp default
LoadModule mpm_prefork_module /usr/lib/apache2/modules/mod_mpm_prefork.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule dir_module /usr/lib/apache2/modules/mod_dir.so
LoadModule mime_module /usr/lib/apache2/modules/mod_mime.so
LoadModule rewrite_module /usr/lib/apache2/modules/mod_rewrite.so
LoadModule alias_module /usr/lib/apache2/modules/mod_alias.so
LoadModule {{.Module}} /usr/lib/apache2/modules/{{.ModuleFile}}
TypesConfig /etc/mime.types
DocumentRoot /srv/site/wordpress
DirectoryIndex index.php index.html
<Directory />
  AllowOverride None
  Require all denied
</Directory>
<Directory /srv/site/wordpress>
  Options FollowSymLinks
  AllowOverride All
  Require all granted
</Directory>
Alias /__sandbox/adminer/ /srv/site/conf/adminer/
<Directory /srv/site/conf/adminer>
  Require all granted
</Directory>
<FilesMatch "\.php$">
  SetHandler application/x-httpd-php
</FilesMatch>
ErrorLog /srv/site/logs/apache-error.log
LogLevel warn
StartServers 1
MinSpareServers 1
MaxSpareServers {{.MaxSpare}}
MaxRequestWorkers {{.Workers}}
MaxConnectionsPerChild 2000
KeepAlive On
KeepAliveTimeout 2
Timeout 60
`))

// Profile sizes a site's web server and opcache: how much memory an
// idle site holds against how fast its pages are.
type Profile struct {
	// Name is how the operator names it (--site-profile).
	Name string
	// MaxSpare is how many idle Apache workers stay; OpcacheMB and
	// InternedMB size opcache's shared memory (only what is used is held).
	MaxSpare, OpcacheMB, InternedMB int
	// FileCache keeps compiled scripts on the site's disk too
	// (tmp/opcache): a started site's first pages skip compiling, and
	// scripts past OpcacheMB load from there rather than compile.
	FileCache bool
}

// The profiles: Lean is the default, Classic what sites had before
// idle sandboxes were sized (benchmarks measure one against the other).
// Measured on a stock site (PHP 8.2): a smaller opcache holds no less
// (what it cannot hold is loaded into each worker instead) and slows
// pages by 12% (16 MiB) to 22% (8 MiB); PHP on the C allocator holds no
// less and is 9% slower; prefork keeps one idle worker more than its
// minimum whatever MaxSpare says. What Lean changes is the file cache:
// the first page after a start takes a third of the time.
var (
	Lean    = Profile{Name: "lean", MaxSpare: 2, OpcacheMB: 64, InternedMB: 8, FileCache: true}
	Classic = Profile{Name: "classic", MaxSpare: 3, OpcacheMB: 64, InternedMB: 8}
)

// Profiles are the profiles by name.
var Profiles = map[string]Profile{Lean.Name: Lean, Classic.Name: Classic}

var phpIniTmpl = template.Must(template.New("php.ini").Parse(`; Written by the sandbox agent.
sendmail_path = /srv/site/conf/sendmail
memory_limit = 256M
upload_max_filesize = 64M
post_max_size = 64M
max_execution_time = 60
display_errors = Off
log_errors = On
error_log = /srv/site/logs/php-error.log
opcache.enable = 1
opcache.memory_consumption = {{.OpcacheMB}}
opcache.interned_strings_buffer = {{.InternedMB}}
{{if .FileCache}}opcache.file_cache = /srv/site/tmp/opcache
{{end}}; wp-config.php holds the site's database password and salts: never
; compiled into a cache, least of all the file cache on the site's disk.
opcache.blacklist_filename = /srv/site/conf/opcache-blacklist.txt
; A file a deploy or the file manager just replaced is served at once:
; timestamps are checked on every request (a stat per file).
opcache.validate_timestamps = 1
opcache.revalidate_freq = 0
session.save_path = /srv/site/tmp
upload_tmp_dir = /srv/site/tmp
sys_temp_dir = /srv/site/tmp
`))

var wpConfig = template.Must(template.New("wp-config").Parse(`<?php
// Written by the sandbox agent.
define('DB_NAME', '{{.DBName}}');
define('DB_USER', '{{.DBUser}}');
define('DB_PASSWORD', '{{.DBPassword}}');
define('DB_HOST', '{{.DBHost}}');
define('DB_CHARSET', 'utf8mb4');
define('DB_COLLATE', '');
{{range .Salts}}define('{{.Name}}', '{{.Value}}');
{{end}}$table_prefix = 'wp_';
define('WP_HOME', '{{.URL}}');
define('WP_SITEURL', '{{.URL}}');
if (($_SERVER['HTTP_X_FORWARDED_PROTO'] ?? '') === 'https') {
    $_SERVER['HTTPS'] = 'on';
}
// Sandboxes have no internet: never call home, never update themselves.
define('WP_HTTP_BLOCK_EXTERNAL', true);
define('AUTOMATIC_UPDATER_DISABLED', true);
define('WP_AUTO_UPDATE_CORE', false);
define('FS_METHOD', 'direct');
// Constants a Blueprint defined (defineWpConfigConsts): a file of the
// site's own, each definition guarded, so the ones above always win.
if (is_file('/srv/site/state/constants.php')) {
    include '/srv/site/state/constants.php';
}
// Debug constants come from a file the agent rewrites; read per request
// (not through opcache), so a change applies at once.
$sandbox_debug = json_decode((string) @file_get_contents('/srv/site/conf/debug.json'), true) ?: array();
define('WP_DEBUG', !empty($sandbox_debug['wpDebug']));
define('WP_DEBUG_LOG', !empty($sandbox_debug['wpDebugLog']));
define('WP_DEBUG_DISPLAY', !empty($sandbox_debug['wpDebugDisplay']));
define('SCRIPT_DEBUG', !empty($sandbox_debug['scriptDebug']));
unset($sandbox_debug);
if (!defined('ABSPATH')) {
    define('ABSPATH', __DIR__ . '/wordpress/');
}
require_once ABSPATH . 'wp-settings.php';
`))

type salt struct{ Name, Value string }

func render(t *template.Template, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", t.Name(), err)
	}
	return b.Bytes(), nil
}
