<?php
/**
 * Plugin Name: Sandbox
 * Description: Helpers of the sandbox service: one-time login links.
 */

// One-time login: /?sandbox_login=TOKEN. The agent stores only the token's
// SHA-256 as a file; claiming it is an atomic rename, so a link works once.
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
    $file = '/srv/site/login/' . hash('sha256', $token) . '.json';
    $claimed = $file . '.claimed-' . getmypid() . '-' . mt_rand();
    if (!@rename($file, $claimed)) {
        $deny();
    }
    $data = json_decode((string) file_get_contents($claimed), true);
    @unlink($claimed);
    if (!is_array($data) || time() > (int) $data['expires']) {
        $deny();
    }
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
