<?php
// Installs WordPress for this sandbox before its web server starts, so
// WordPress does not probe itself over HTTP. Runs once.
$cfg = json_decode(@file_get_contents('/srv/site/secrets/install.json'), true);
if (!is_array($cfg)) {
    fwrite(STDERR, "sandbox: install.json missing\n");
    exit(1);
}
define('WP_INSTALLING', true);
$_SERVER['HTTP_HOST'] = parse_url($cfg['url'], PHP_URL_HOST);
require '/srv/site/wordpress/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
if (!is_blog_installed()) {
    $result = wp_install($cfg['title'], $cfg['user'], $cfg['email'], false, '', $cfg['password']);
    if (is_wp_error($result)) {
        fwrite(STDERR, 'sandbox: install failed: ' . $result->get_error_message() . "\n");
        exit(1);
    }
}
update_option('blogdescription', 'A disposable WordPress sandbox');
// The password is not needed after install (magic links sign in): the
// agent removes install.json once the site answers.
echo "sandbox: installed\n";
