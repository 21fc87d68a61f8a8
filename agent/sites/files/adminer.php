<?php
// The sandbox's database UI: Debian's Adminer, signed in only through a
// one-time link the API hands out, and only to this site's database with
// this site's own credentials. Written by the agent; root-owned.
$sandbox_db = json_decode((string)@file_get_contents('/srv/site/secrets/adminer.json'), true);
if (!is_array($sandbox_db)) {
    http_response_code(503);
    exit("The database UI is not configured for this site.\n");
}
// localhost:/run/mysqld/mysqld.sock: the node's MariaDB through its socket.
$sandbox_server = $sandbox_db['server'];
session_save_path('/srv/site/tmp');
session_name('adminer_sid');
$sandbox_https = ($_SERVER['HTTP_X_FORWARDED_PROTO'] ?? '') === 'https';
session_set_cookie_params(['lifetime' => 0, 'path' => '/__sandbox/adminer/', 'httponly' => true,
    'secure' => $sandbox_https, 'samesite' => 'Lax']);
session_cache_limiter('');
session_start();

if (isset($_GET['sandbox_token'])) {
    $t = (string)$_GET['sandbox_token'];
    $ok = false;
    if (preg_match('/^[A-Za-z0-9_-]{20,128}$/', $t)) {
        $h = hash('sha256', $t);
        $f = '/srv/site/login/adminer-' . $h . '.json';
        // The token file is the agent's (read-only here); using it is
        // marking it used on the site's own disk, atomically: of two
        // requests with one link, one wins.
        $meta = is_file($f) ? json_decode((string)file_get_contents($f), true) : null;
        if (is_array($meta) && (int)($meta['expires'] ?? 0) > time()) {
            @mkdir('/srv/site/state/used-tokens', 0700);
            $mark = @fopen('/srv/site/state/used-tokens/adminer-' . $h, 'x');
            if ($mark) { fclose($mark); $ok = true; }
        }
    }
    if (!$ok) {
        http_response_code(403);
        header('Content-Type: text/plain; charset=utf-8');
        exit("This database link was already used or has expired. Ask the API for a new one.\n");
    }
    session_regenerate_id(true);
    $_SESSION = ['sandbox_adminer' => true];
    $_SESSION['pwds']['server'][$sandbox_server][$sandbox_db['user']] = '';
    $_SESSION['db']['server'][$sandbox_server][$sandbox_db['user']][$sandbox_db['name']] = true;
    header('Location: /__sandbox/adminer/?' . http_build_query(['server' => $sandbox_server, 'username' => $sandbox_db['user'],
        'db' => $sandbox_db['name']]), true, 302);
    exit;
}
if (empty($_SESSION['sandbox_adminer'])) {
    http_response_code(403);
    header('Content-Type: text/plain; charset=utf-8');
    exit("Open the database UI with the one-time link from GET /api/app/sites/{id}/database.\n");
}

function adminer_object() {
    class SandboxAdminer extends Adminer {
        function name() { return 'Sandbox database'; }
        // Whatever the URL or a form says, the connection is this site's.
        function credentials() {
            global $sandbox_db, $sandbox_server;
            return [$sandbox_server, $sandbox_db['user'], $sandbox_db['password']];
        }
        function login($login, $password) {
            global $sandbox_db;
            return !empty($_SESSION['sandbox_adminer']) && $login === $sandbox_db['user'];
        }
        function database() { global $sandbox_db; return $sandbox_db['name']; }
        function databases($flush = true) { global $sandbox_db; return [$sandbox_db['name']]; }
        function loginForm() {
            echo "<p>Open the database UI with the one-time link from the API.</p>\n";
        }
    }
    return new SandboxAdminer;
}

include '/usr/share/adminer/adminer.php';
