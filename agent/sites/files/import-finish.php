<?php
// Runs inside a sandbox, as the site's user, right after an import took
// the site's place: brings the imported database up to this WordPress
// (the upgrade wp-admin would offer) and drops caches that still name
// the live site. Prints one JSON line: {"notes": [...]}.
$notes = array();
$_SERVER['HTTP_HOST'] = 'localhost';
if (is_file('/srv/site/wp-config.php')) {
    $src = (string) file_get_contents('/srv/site/wp-config.php');
    if (preg_match("/define\\('WP_HOME', '([^']+)'\\)/", $src, $m)) {
        $u = parse_url($m[1]);
        $_SERVER['HTTP_HOST'] = $u['host'] . (isset($u['port']) ? ':' . $u['port'] : '');
        $_SERVER['SERVER_NAME'] = $u['host'];
    }
}
define('WP_INSTALLING', true); // no cron, no update checks while we work
require '/srv/site/wordpress/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
global $wp_db_version;
$had = (int) get_option('db_version');
if ($had > 0 && $had < (int) $wp_db_version) {
    wp_upgrade();
    $notes[] = sprintf('the database was upgraded from WordPress db_version %d to %d', $had, $wp_db_version);
} elseif ($had > (int) $wp_db_version) {
    $notes[] = sprintf('the database comes from a newer WordPress (db_version %d; this sandbox has %d)', $had, $wp_db_version);
}
// Transients and the rewrite rules were made for the live site.
$GLOBALS['wpdb']->query("DELETE FROM {$GLOBALS['wpdb']->options} WHERE option_name LIKE '\\_transient\\_%' OR option_name LIKE '\\_site\\_transient\\_%'");
delete_option('rewrite_rules');
wp_cache_flush();
echo "\n" . json_encode(array('notes' => $notes)) . "\n";
