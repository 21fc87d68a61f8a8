<?php
/**
 * Plugin Name: Sandbox
 * Description: Helpers of the sandbox service: one-time login links.
 */

// One-time login: /?sandbox_login=TOKEN. The agent stores only the token's
// SHA-256, in a directory the site can read but not change; using a token
// is marking it used on the site's own disk with an exclusive create, so
// a link works once even when two requests race.
add_action('init', function () {
    if (!isset($_GET['sandbox_login'])) {
        return;
    }
    nocache_headers();
    $token = (string) $_GET['sandbox_login'];
    $deny = function () {
        wp_die('This login link is invalid, was already used, or has expired.', 'Login link', array('response' => 403));
    };
    if (!preg_match('/^[A-Za-z0-9_-]{20,128}$/', $token)) {
        $deny();
    }
    $hash = hash('sha256', $token);
    $file = '/srv/site/login/' . $hash . '.json';
    $data = is_file($file) ? json_decode((string) file_get_contents($file), true) : null;
    if (!is_array($data) || time() > (int) $data['expires']) {
        $deny();
    }
    @mkdir('/srv/site/state/used-tokens', 0700);
    $mark = @fopen('/srv/site/state/used-tokens/' . $hash, 'x');
    if (!$mark) {
        $deny();
    }
    fclose($mark);
    $user = get_user_by('login', (string) $data['user']);
    if (!$user) {
        $deny();
    }
    wp_set_current_user($user->ID);
    wp_set_auth_cookie($user->ID, false, is_ssl());
    $to = isset($data['redirect']) && $data['redirect'] !== '' ? home_url($data['redirect']) : admin_url();
    wp_safe_redirect($to);
    exit;
}, 0);
