<?php
// The Blueprint steps that are not plain file operations (see run.php).
// Each follows Playground's step of the same name; where this service
// differs (no network, one-time login links, a real MySQL database), the
// comment says how.

// Constants the service owns: wp-config.php defines them, and a
// Blueprint defining one first would win over it.
const BP_RESERVED_CONSTANTS = array('DB_NAME', 'DB_USER', 'DB_PASSWORD', 'DB_HOST', 'DB_CHARSET', 'DB_COLLATE',
    'AUTH_KEY', 'SECURE_AUTH_KEY', 'LOGGED_IN_KEY', 'NONCE_KEY', 'AUTH_SALT', 'SECURE_AUTH_SALT', 'LOGGED_IN_SALT',
    'NONCE_SALT', 'WP_HOME', 'WP_SITEURL', 'ABSPATH', 'WP_HTTP_BLOCK_EXTERNAL', 'AUTOMATIC_UPDATER_DISABLED',
    'WP_AUTO_UPDATE_CORE', 'FS_METHOD',
    // The site's debug settings own these; the agent applies them itself.
    'WP_DEBUG', 'WP_DEBUG_LOG', 'WP_DEBUG_DISPLAY', 'SCRIPT_DEBUG');

function bp_wordpress_mode($step, $args)
{
    switch ($step) {
        case 'runSql':
        case 'resetData':
            return 'db';
        case 'installPlugin':
        case 'installTheme':
        case 'activatePlugin':
        case 'activateTheme':
            return 'admin';
        case 'importThemeStarterContent':
            return 'customize';
        case 'setSiteOptions':
        case 'updateUserMeta':
        case 'setSiteLanguage':
        case 'login':
        case 'importWxr':
            return 'full';
        case 'wp-cli':
            $argv = isset($args['argv']) && is_array($args['argv']) ? $args['argv'] : array();
            foreach ($argv as $a) {
                if (is_string($a) && $a !== '' && $a[0] !== '-' && $a !== 'wp') {
                    return in_array($a, array('plugin', 'theme'), true) ? 'admin' : 'full';
                }
            }
            return 'full';
    }
    return 'none';
}

// bp_become_admin makes the site's admin the current user, as Playground
// does before it activates or imports anything.
function bp_become_admin()
{
    $login = (string) bp_req('adminUser', '');
    $u = $login !== '' ? get_user_by('login', $login) : false;
    if (!$u) {
        $admins = get_users(array('role' => 'administrator', 'number' => 1, 'orderby' => 'ID'));
        $u = $admins ? $admins[0] : false;
    }
    if ($u) {
        wp_set_current_user($u->ID);
    }
    $GLOBALS['bp']['admin'] = $u;
    return $u;
}

function bp_run_step($step)
{
    $handlers = array(
        'writeFile' => 'bp_step_write_file',
        'writeFiles' => 'bp_step_write_files',
        'mkdir' => 'bp_step_mkdir',
        'rm' => 'bp_step_rm',
        'rmdir' => 'bp_step_rmdir',
        'mv' => 'bp_step_mv',
        'cp' => 'bp_step_cp',
        'unzip' => 'bp_step_unzip',
        'runPHP' => 'bp_step_run_php',
        'runPHPWithOptions' => 'bp_step_run_php_with_options',
        'runSql' => 'bp_step_run_sql',
        'setSiteOptions' => 'bp_step_set_site_options',
        'updateUserMeta' => 'bp_step_update_user_meta',
        'defineWpConfigConsts' => 'bp_step_define_consts',
        'setSiteLanguage' => 'bp_step_set_site_language',
        'installPlugin' => 'bp_step_install_plugin',
        'installTheme' => 'bp_step_install_theme',
        'activatePlugin' => 'bp_step_activate_plugin',
        'activateTheme' => 'bp_step_activate_theme',
        'resetData' => 'bp_step_reset_data',
        'login' => 'bp_step_login',
        'request' => 'bp_step_request',
        'importThemeStarterContent' => 'bp_step_import_starter_content',
        'importWxr' => 'bp_step_import_wxr',
        'wp-cli' => 'bp_step_wp_cli',
    );
    $refused = array(
        'enableMultisite' => 'sandboxes are single sites; multisite is not available',
        'importWordPressFiles' => "replacing a sandbox's WordPress files is done by an Import, not a Blueprint step",
        'defineSiteUrl' => "a sandbox's URL is set by the service",
        'runWpInstallationWizard' => 'sandboxes come installed',
    );
    if (isset($refused[$step])) {
        bp_fail('unsupported', "the step $step is not supported here: " . $refused[$step]);
    }
    if (!isset($handlers[$step])) {
        bp_fail('unsupported', "unknown step $step");
    }
    call_user_func($handlers[$step]);
}

// ---- runPHP ---------------------------------------------------------------

// bp_server_vars are the $_SERVER entries of a request to the site's
// front page, which code run by runPHP sees as Playground's would.
function bp_server_vars()
{
    $u = parse_url(bp_site_url());
    $host = isset($u['host']) ? $u['host'] : 'localhost';
    $https = isset($u['scheme']) && $u['scheme'] === 'https';
    $s = array(
        'HTTP_HOST' => $host . (isset($u['port']) ? ':' . $u['port'] : ''),
        'SERVER_NAME' => $host,
        'SERVER_PORT' => isset($u['port']) ? (string) $u['port'] : ($https ? '443' : '80'),
        'SERVER_PROTOCOL' => 'HTTP/1.1',
        'REQUEST_METHOD' => 'GET',
        'REQUEST_URI' => '/',
        'QUERY_STRING' => '',
        'SCRIPT_NAME' => '/index.php',
        'PHP_SELF' => '/index.php',
        'DOCUMENT_ROOT' => BP_ROOT,
        'REMOTE_ADDR' => '127.0.0.1',
        'REQUEST_TIME' => time(),
    );
    if ($https) {
        $s['HTTPS'] = 'on';
    }
    return $s;
}

// bp_php_child runs PHP code as its own process (cwd /, the environment
// inherited plus $env), with a prepended file setting up the request's
// superglobals. Output is captured, bounded. Answers array(exit code,
// stdout, stderr).
function bp_php_child($script, $prepend, $stdin = '', $env = null)
{
    $pre = BP_TMP . '/bp-prepend-' . bin2hex(random_bytes(6)) . '.php';
    if (@file_put_contents($pre, $prepend) === false) {
        bp_write_failed($pre);
    }
    $GLOBALS['bp']['cleanup'][] = $pre;
    $cmd = array(PHP_BINARY, '-d', 'display_errors=stderr', '-d', 'memory_limit=512M', '-d', 'auto_prepend_file=' . $pre, $script);
    $fullEnv = null;
    if ($env) {
        $fullEnv = getenv();
        foreach ($env as $k => $v) {
            $fullEnv[(string) $k] = (string) $v;
        }
    }
    $proc = proc_open($cmd, array(0 => array('pipe', 'r'), 1 => array('pipe', 'w'), 2 => array('pipe', 'w')), $pipes, '/', $fullEnv);
    if (!is_resource($proc)) {
        bp_fail('php_error', 'cannot start PHP');
    }
    return bp_pump($proc, $pipes, (string) $stdin);
}

// bp_pump feeds a child its stdin and collects its output: the first 60
// kB of stdout, the last 16 kB of stderr.
function bp_pump($proc, $pipes, $stdin)
{
    $out = '';
    $outMore = 0;
    $err = '';
    foreach ($pipes as $p) {
        stream_set_blocking($p, false);
    }
    $inPos = 0;
    $inOpen = true;
    if ($stdin === '') {
        fclose($pipes[0]);
        $inOpen = false;
    }
    $open = array(1 => true, 2 => true);
    while ($open[1] || $open[2] || $inOpen) {
        $r = array();
        foreach (array(1, 2) as $i) {
            if ($open[$i]) {
                $r[] = $pipes[$i];
            }
        }
        $w = $inOpen ? array($pipes[0]) : array();
        $x = null;
        if (@stream_select($r, $w, $x, 5) === false) {
            break;
        }
        foreach ($r as $s) {
            $chunk = fread($s, 65536);
            $i = $s === $pipes[1] ? 1 : 2;
            if ($chunk === false || ($chunk === '' && feof($s))) {
                $open[$i] = false;
                fclose($s);
                continue;
            }
            if ($i === 1) {
                $room = 60000 - strlen($out);
                if ($room > 0) {
                    $out .= substr($chunk, 0, $room);
                }
                $outMore += max(0, strlen($chunk) - max(0, $room));
            } else {
                $err = substr($err . $chunk, -16384);
            }
        }
        if ($w) {
            $n = @fwrite($pipes[0], substr($stdin, $inPos, 65536));
            if ($n === false || $n === 0 && feof($pipes[0])) {
                $inPos = strlen($stdin);
            } else {
                $inPos += $n;
            }
            if ($inPos >= strlen($stdin)) {
                fclose($pipes[0]);
                $inOpen = false;
            }
        }
    }
    // proc_close waits for the child: no pipe may still be open then.
    foreach (array(0 => $inOpen, 1 => $open[1], 2 => $open[2]) as $i => $isOpen) {
        if ($isOpen) {
            @fclose($pipes[$i]);
        }
    }
    $code = proc_close($proc);
    if ($outMore > 0) {
        $out .= "\n… ($outMore more bytes of output)";
    }
    return array($code, $out, $err);
}

// bp_run_code writes code to a file in /tmp and runs it; a failure names
// the step, not the temporary file.
function bp_run_code($code, $what, $prepend, $stdin = '', $env = null, $script = null)
{
    if ($script === null) {
        $script = BP_TMP . '/bp-code-' . bin2hex(random_bytes(6)) . '.php';
        if (@file_put_contents($script, $code) === false) {
            bp_write_failed($script);
        }
        $GLOBALS['bp']['cleanup'][] = $script;
    }
    list($exit, $out, $err) = bp_php_child($script, $prepend, $stdin, $env);
    $clean = function ($s) use ($script, $what) {
        return str_replace(array($script, BP_ROOT), array("the $what code", '/wordpress'), $s);
    };
    if (trim($out) !== '') {
        bp_log($out);
    }
    if ($exit !== 0) {
        $why = trim($err) !== '' ? $err : $out;
        bp_fail('php_error', "$what failed (exit status $exit): " . bp_excerpt(trim($clean($why)), 1500));
    }
    if (trim($err) !== '') {
        bp_log("stderr:\n" . bp_excerpt($clean($err), 4000));
    }
}

function bp_prepend_code($server, $get = array(), $post = array(), $cookie = array())
{
    return '<?php $_SERVER = array_merge($_SERVER, ' . var_export($server, true) . ");\n"
        . '$_GET = ' . var_export($get, true) . ";\n"
        . '$_POST = ' . var_export($post, true) . ";\n"
        . '$_COOKIE = ' . var_export($cookie, true) . ";\n"
        . "\$_REQUEST = array_merge(\$_GET, \$_POST);\n";
}

function bp_step_run_php()
{
    $code = bp_text(bp_arg('code'), 'runPHP code');
    bp_run_code($code, 'runPHP', bp_prepend_code(bp_server_vars()));
}

// runPHPWithOptions: the code (or a script of the site) runs with the
// request the options describe in its superglobals; a body also arrives
// on stdin (php://stdin; php://input stays empty on the command line).
function bp_step_run_php_with_options()
{
    $o = bp_arg('options');
    if (!is_array($o)) {
        bp_fail('invalid', 'runPHPWithOptions needs options');
    }
    $server = bp_server_vars();
    $method = isset($o['method']) ? strtoupper((string) $o['method']) : 'GET';
    if (!preg_match('/^[A-Z]{1,16}$/', $method)) {
        bp_fail('invalid', 'runPHPWithOptions: bad method');
    }
    $uri = '/';
    foreach (array('relativeUri', 'url', 'path') as $k) {
        if (isset($o[$k]) && is_string($o[$k]) && $o[$k] !== '') {
            $uri = $o[$k];
            break;
        }
    }
    if (preg_match('#^https?://#i', $uri)) {
        $pu = parse_url($uri);
        $uri = (isset($pu['path']) ? $pu['path'] : '/') . (isset($pu['query']) ? '?' . $pu['query'] : '');
    }
    if ($uri === '' || $uri[0] !== '/') {
        $uri = '/' . $uri;
    }
    $query = (string) parse_url($uri, PHP_URL_QUERY);
    $server['REQUEST_METHOD'] = $method;
    $server['REQUEST_URI'] = $uri;
    $server['QUERY_STRING'] = $query;
    $headers = isset($o['headers']) && is_array($o['headers']) ? $o['headers'] : array();
    $ctype = '';
    $cookie = array();
    foreach ($headers as $k => $v) {
        $name = strtoupper(str_replace('-', '_', (string) $k));
        if (!preg_match('/^[A-Z0-9_]+$/', $name)) {
            continue;
        }
        $v = (string) $v;
        if ($name === 'CONTENT_TYPE' || $name === 'CONTENT_LENGTH') {
            $server[$name] = $v;
        } else {
            $server['HTTP_' . $name] = $v;
        }
        if ($name === 'CONTENT_TYPE') {
            $ctype = strtolower($v);
        }
        if ($name === 'COOKIE') {
            foreach (explode(';', $v) as $pair) {
                $kv = explode('=', trim($pair), 2);
                if (count($kv) === 2) {
                    $cookie[urldecode($kv[0])] = urldecode($kv[1]);
                }
            }
        }
        if ($name === 'HOST') {
            $server['SERVER_NAME'] = preg_replace('/:\d+$/', '', $v);
        }
    }
    $get = array();
    parse_str($query, $get);
    $post = array();
    $body = isset($o['body']) ? $o['body'] : '';
    if (is_array($body)) {
        foreach ($body as $k => $v) {
            if (!is_string($v) && !is_numeric($v)) {
                bp_fail('unsupported', 'runPHPWithOptions: only text form fields are supported in body');
            }
            $post[(string) $k] = (string) $v;
        }
        $body = http_build_query($post);
        if ($ctype === '') {
            $server['CONTENT_TYPE'] = 'application/x-www-form-urlencoded';
        }
    } else {
        $body = (string) $body;
        if ($body !== '' && ($ctype === '' || strpos($ctype, 'application/x-www-form-urlencoded') === 0)) {
            parse_str($body, $post);
        }
    }
    if ($body !== '' && !isset($server['CONTENT_LENGTH'])) {
        $server['CONTENT_LENGTH'] = (string) strlen($body);
    }
    if (isset($o['$_SERVER']) && is_array($o['$_SERVER'])) {
        foreach ($o['$_SERVER'] as $k => $v) {
            $server[(string) $k] = is_scalar($v) ? (string) $v : $v;
        }
    }
    $env = isset($o['env']) && is_array($o['env']) ? $o['env'] : null;
    $script = null;
    $code = null;
    if (isset($o['code'])) {
        $code = bp_text($o['code'], 'runPHPWithOptions code');
    } elseif (isset($o['scriptPath']) && is_string($o['scriptPath'])) {
        $script = bp_site_path($o['scriptPath'], 'runPHPWithOptions scriptPath');
        if (!is_file($script)) {
            bp_fail('not_found', 'runPHPWithOptions: ' . $o['scriptPath'] . ' does not exist');
        }
        $rel = substr($script, strlen(BP_ROOT));
        $server['SCRIPT_NAME'] = $server['PHP_SELF'] = $rel;
        $server['SCRIPT_FILENAME'] = $script;
    } else {
        bp_fail('invalid', 'runPHPWithOptions needs options.code or options.scriptPath');
    }
    bp_run_code($code, 'runPHPWithOptions', bp_prepend_code($server, $get, $post, $cookie), $body, $env, $script);
}

// ---- The database ---------------------------------------------------------

// runSql: statements run one by one through $wpdb, as the site's own
// database user; a statement is the lines up to one ending in ";". The
// first statement that fails stops the step.
function bp_step_run_sql()
{
    global $wpdb;
    $sql = bp_arg('sql');
    if (bp_is_file_ref($sql)) {
        list($path) = bp_file_ref($sql, 'runSql sql');
        $f = fopen($path, 'rb');
    } elseif (is_string($sql)) {
        $f = fopen('php://memory', 'w+b');
        fwrite($f, $sql);
        rewind($f);
    } else {
        bp_fail('invalid', 'runSql needs sql');
    }
    $wpdb->suppress_errors(true);
    $wpdb->hide_errors();
    $buf = '';
    $n = 0;
    $line_no = 0;
    $start = 0;
    $run = function ($q) use ($wpdb, &$n, &$start) {
        $q = rtrim(trim($q), "; \t\r\n");
        if ($q === '') {
            return;
        }
        $n++;
        $wpdb->last_error = '';
        $r = $wpdb->query($q);
        if ($r === false || $wpdb->last_error !== '') {
            $err = $wpdb->last_error !== '' ? $wpdb->last_error : 'the query failed';
            // MariaDB found no room for the site's database (on the
            // site's disk): the disk is full, as for a file.
            $code = preg_match('/ is full|No space left on device/i', $err) ? 'disk_full' : 'sql_error';
            bp_fail($code, "runSql: statement $n (line $start) failed: $err — in: " . bp_excerpt(preg_replace('/\s+/', ' ', $q), 200, false));
        }
    };
    while (($line = fgets($f)) !== false) {
        $line_no++;
        if ($buf === '' && (trim($line) === '' || preg_match('/^\s*(--\s|--$|#)/', $line))) {
            continue;
        }
        if ($buf === '') {
            $start = $line_no;
        }
        $buf .= $line;
        if (substr(rtrim($line), -1) === ';') {
            $run($buf);
            $buf = '';
        }
    }
    fclose($f);
    if (trim($buf, " \t\r\n;") !== '') {
        $run($buf);
    }
    bp_log("ran $n SQL statement" . ($n === 1 ? '' : 's'));
}

// resetData: as Playground, all posts, their meta, comments and their
// meta go, and the tables count from 1 again. Term relationships of the
// removed posts go too (Playground leaves them, and a new post 1 would
// inherit the old one's terms), and term counts are recomputed.
// contentTypes (posts, pages, comments) limits what goes.
function bp_step_reset_data()
{
    global $wpdb;
    $types = bp_arg('contentTypes');
    $q = function ($sql) use ($wpdb) {
        $wpdb->last_error = '';
        if ($wpdb->query($sql) === false || $wpdb->last_error !== '') {
            bp_fail('sql_error', 'resetData: ' . $wpdb->last_error . ' — in: ' . bp_excerpt($sql, 200, false));
        }
    };
    if ($types === null) {
        foreach (array($wpdb->posts, $wpdb->postmeta, $wpdb->comments, $wpdb->commentmeta) as $t) {
            $q("DELETE FROM `$t`");
            $q("ALTER TABLE `$t` AUTO_INCREMENT = 1");
        }
        bp_log('removed all posts, pages, attachments, comments and their meta');
    } else {
        if (!is_array($types)) {
            bp_fail('invalid', 'resetData contentTypes must be a list');
        }
        $postTypes = array();
        foreach ($types as $t) {
            if ($t === 'posts') {
                $postTypes[] = 'post';
            } elseif ($t === 'pages') {
                $postTypes[] = 'page';
            } elseif ($t !== 'comments') {
                bp_fail('invalid', "resetData: unknown content type $t (posts, pages, comments)");
            }
        }
        if (in_array('comments', $types, true)) {
            $q("DELETE FROM `{$wpdb->comments}`");
            $q("DELETE FROM `{$wpdb->commentmeta}`");
        }
        if ($postTypes) {
            $in = "'" . implode("','", $postTypes) . "'";
            $q("DELETE FROM `{$wpdb->posts}` WHERE post_type IN ($in)");
            $q("DELETE pm FROM `{$wpdb->postmeta}` pm LEFT JOIN `{$wpdb->posts}` p ON p.ID = pm.post_id WHERE p.ID IS NULL");
            $q("DELETE c FROM `{$wpdb->comments}` c LEFT JOIN `{$wpdb->posts}` p ON p.ID = c.comment_post_ID WHERE p.ID IS NULL");
            $q("DELETE cm FROM `{$wpdb->commentmeta}` cm LEFT JOIN `{$wpdb->comments}` c ON c.comment_ID = cm.comment_id WHERE c.comment_ID IS NULL");
        }
        bp_log('removed ' . implode(', ', $types));
    }
    $q("DELETE tr FROM `{$wpdb->term_relationships}` tr JOIN `{$wpdb->term_taxonomy}` tt ON tt.term_taxonomy_id = tr.term_taxonomy_id LEFT JOIN `{$wpdb->posts}` p ON p.ID = tr.object_id WHERE p.ID IS NULL AND tt.taxonomy <> 'link_category'");
    $q("UPDATE `{$wpdb->term_taxonomy}` tt SET count = (SELECT COUNT(*) FROM `{$wpdb->term_relationships}` tr WHERE tr.term_taxonomy_id = tt.term_taxonomy_id) WHERE tt.taxonomy <> 'link_category'");
    $q("UPDATE `{$wpdb->posts}` p SET comment_count = (SELECT COUNT(*) FROM `{$wpdb->comments}` c WHERE c.comment_post_ID = p.ID AND c.comment_approved = '1')");
    wp_cache_flush();
}

// ---- Options, users, constants ---------------------------------------------

function bp_step_set_site_options()
{
    $opts = bp_arg('options');
    if (!is_array($opts)) {
        bp_fail('invalid', 'setSiteOptions needs options (an object)');
    }
    foreach ($opts as $name => $value) {
        $name = (string) $name;
        if ($name === '') {
            bp_fail('invalid', 'setSiteOptions: an option has no name');
        }
        update_option($name, $value);
        bp_log("set the option $name");
    }
}

function bp_step_update_user_meta()
{
    $id = bp_arg('userId');
    $meta = bp_arg('meta');
    if (!is_array($meta)) {
        bp_fail('invalid', 'updateUserMeta needs meta (an object)');
    }
    if (!is_numeric($id) || !get_userdata((int) $id)) {
        bp_fail('not_found', 'updateUserMeta: there is no user ' . json_encode($id));
    }
    foreach ($meta as $k => $v) {
        update_user_meta((int) $id, wp_slash((string) $k), wp_slash($v));
        bp_log("set the user meta $k of user $id");
    }
}

// defineWpConfigConsts: the constants are kept in state/constants.json
// (the source of truth, merged with what earlier steps defined) and
// written out as state/constants.php, which wp-config.php includes before
// its own definitions; each is guarded, so the service's always win.
// method and virtualize change nothing here.
function bp_step_define_consts()
{
    $consts = bp_arg('consts');
    if (!is_array($consts)) {
        bp_fail('invalid', 'defineWpConfigConsts needs consts (an object)');
    }
    foreach ($consts as $name => $v) {
        $name = (string) $name;
        if (!preg_match('/^[A-Za-z_][A-Za-z0-9_]*$/', $name)) {
            bp_fail('invalid', "defineWpConfigConsts: $name is not a valid constant name");
        }
        if (in_array(strtoupper($name), BP_RESERVED_CONSTANTS, true)) {
            bp_fail('reserved_constant', "defineWpConfigConsts: $name is set by the service and cannot be defined by a Blueprint");
        }
        if (is_object($v)) {
            bp_fail('invalid', "defineWpConfigConsts: $name has a value PHP cannot hold in a constant");
        }
    }
    if (!$consts) {
        bp_log('no constants to define');
        return;
    }
    $json = BP_STATE . '/constants.json';
    $all = array();
    if (is_file($json)) {
        $prev = json_decode((string) @file_get_contents($json), true);
        if (is_array($prev)) {
            $all = $prev;
        }
    }
    foreach ($consts as $name => $v) {
        $all[(string) $name] = $v;
    }
    $php = "<?php\n// Written by the Blueprint runner (defineWpConfigConsts) from constants.json.\n";
    foreach ($all as $name => $v) {
        if (!preg_match('/^[A-Za-z_][A-Za-z0-9_]*$/', $name) || in_array(strtoupper($name), BP_RESERVED_CONSTANTS, true)) {
            continue;
        }
        $php .= "if (!defined('$name')) define('$name', " . var_export($v, true) . ");\n";
    }
    bp_state_write($json, json_encode($all, JSON_UNESCAPED_SLASHES | JSON_PRETTY_PRINT | JSON_PRESERVE_ZERO_FRACTION) . "\n");
    bp_state_write(BP_STATE . '/constants.php', $php);
    foreach ($consts as $name => $v) {
        bp_log("defined $name = " . bp_excerpt(json_encode($v, JSON_UNESCAPED_SLASHES), 200, false));
    }
}

// bp_state_write replaces a file of state/ atomically (a link the site
// put there is replaced, not followed).
function bp_state_write($path, $data)
{
    $tmp = $path . '.bp-' . bin2hex(random_bytes(6));
    if (@file_put_contents($tmp, $data) !== strlen($data) || !@rename($tmp, $path)) {
        @unlink($tmp);
        bp_write_failed($path);
    }
}

// setSiteLanguage: the translation ZIPs were fetched beforehand (core,
// and those of the installed plugins and themes that have one); only
// translation files are unpacked. WordPress reads the language from the
// WPLANG option (Playground defines the WPLANG constant; the option is
// what the admin screens change, and en_US is stored as "" as they do).
function bp_step_set_site_language()
{
    $lang = bp_arg('language');
    if (!is_string($lang) || !preg_match('/^[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,12}){0,3}$/', $lang)) {
        bp_fail('invalid', 'setSiteLanguage: ' . json_encode($lang) . ' is not a language code (like de_DE or ja)');
    }
    $packs = bp_req('languagePacks', array());
    $langDir = bp_site_path(defined('WP_LANG_DIR') ? WP_LANG_DIR : WP_CONTENT_DIR . '/languages', 'the languages directory');
    $core = false;
    $keep = function ($n) {
        return substr($n, -1) === '/' || preg_match('/\.(mo|po|json|l10n\.php)$/i', $n);
    };
    foreach ((array) $packs as $p) {
        $type = isset($p['type']) ? $p['type'] : '';
        if (!in_array($type, array('core', 'plugin', 'theme'), true)) {
            bp_fail('invalid', "setSiteLanguage: unknown language pack type $type");
        }
        list($zip, $name) = bp_file_ref($p, "the $type translation");
        $dst = $langDir . ($type === 'core' ? '' : "/{$type}s");
        $stage = bp_stage();
        $n = bp_unzip_to($zip, $stage, $name, $keep);
        bp_mkdirs($dst);
        foreach (scandir($stage) as $e) {
            if ($e !== '.' && $e !== '..') {
                bp_merge("$stage/$e", "$dst/$e");
            }
        }
        bp_rmtree($stage);
        bp_log("installed the $type translation $name ($n " . ($n === 1 ? 'file' : 'files') . ') into ' . bp_site_name($dst));
        if ($type === 'core') {
            $core = true;
        }
    }
    if (!$core && $lang !== 'en_US') {
        bp_fail('not_found', "setSiteLanguage: no WordPress translation for $lang was found. Check the language code; translate.wordpress.org lists the available ones");
    }
    update_option('WPLANG', $lang === 'en_US' ? '' : $lang);
    bp_log("the site's language is now $lang");
}

function bp_step_login()
{
    $name = bp_arg('username', '');
    $admin = (string) bp_req('adminUser', '');
    if (!is_string($name) || $name === '') {
        $name = $admin !== '' ? $admin : 'admin';
    }
    $u = get_user_by('login', $name);
    if (!$u && $name === 'admin' && $admin !== '' && $admin !== 'admin') {
        // Playground's admin is "admin"; here the site's admin is whoever
        // made it.
        $u = get_user_by('login', $admin);
        if ($u) {
            bp_log("there is no user admin here: signing in as the site's admin, $admin");
        }
    }
    if (!$u) {
        bp_fail('not_found', "login: there is no user $name");
    }
    bp_log("signs in as {$u->user_login} (with a one-time link; the password is not used)");
    bp_done(array('user' => $u->user_login));
}

// ---- Plugins and themes ------------------------------------------------------

function bp_valid_folder($name, $what)
{
    if (!is_string($name) || $name === '' || $name === '.' || $name === '..' || strpbrk($name, "/\\\0") !== false
        || strlen($name) > 200 || $name[0] === '.') {
        bp_fail('invalid', "$what " . json_encode($name) . ' is not a valid folder name');
    }
}

function bp_plugins_dir()
{
    require_once ABSPATH . 'wp-admin/includes/plugin.php';
    $d = bp_site_path(WP_PLUGIN_DIR, 'the plugins directory');
    bp_mkdirs($d);
    return $d;
}

function bp_themes_dir()
{
    require_once ABSPATH . 'wp-admin/includes/theme.php';
    $d = bp_site_path(get_theme_root(), 'the themes directory');
    bp_mkdirs($d);
    return $d;
}

// bp_install_asset puts a plugin or theme (a ZIP or a directory) in
// place, as Playground's installAsset: the folder is targetFolderName,
// else the ZIP's single top-level directory, else the ZIP's (or the
// directory's) name. A plugin ZIP holding a single PHP file installs as
// that file. Answers array(folder or file name, path, skipped).
function bp_install_asset($kind, $data, $target, $ifAlready)
{
    if (!in_array($ifAlready, array('overwrite', 'skip', 'error'), true)) {
        bp_fail('invalid', "ifAlreadyInstalled must be overwrite, skip or error, not $ifAlready");
    }
    if ($target !== null && $target !== '') {
        bp_valid_folder($target, 'targetFolderName');
    } else {
        $target = '';
    }
    $base = $kind === 'theme' ? bp_themes_dir() : bp_plugins_dir();
    $stage = bp_stage();
    $src = $stage . '/x';
    @mkdir($src, 0755);
    if (bp_is_dir_ref($data)) {
        $d = $data['$dir'];
        $name = isset($d['name']) && is_string($d['name']) ? $d['name'] : $kind;
        bp_write_tree($d, $src, "the $kind files");
        $folder = $target !== '' ? $target : $name;
        $what = $name;
    } elseif (bp_is_file_ref($data)) {
        list($zip, $zipName) = bp_file_ref($data, "the $kind ZIP");
        $zipName = basename(str_replace('\\', '/', $zipName));
        bp_unzip_to($zip, $src, $zipName);
        $entries = array_values(array_diff(scandir($src), array('.', '..', '__MACOSX')));
        $what = $zipName;
        if (!$entries) {
            bp_fail('invalid', "the $kind ZIP $zipName is empty");
        }
        if (count($entries) === 1 && is_dir("$src/{$entries[0]}") && !is_link("$src/{$entries[0]}")) {
            $src = "$src/{$entries[0]}";
            $folder = $entries[0];
        } elseif ($kind === 'plugin' && count($entries) === 1 && is_file("$src/{$entries[0]}") && preg_match('/\.php$/i', $entries[0])) {
            if ($target === '') {
                $src = "$src/{$entries[0]}";
                $folder = $entries[0];
            }
        } else {
            $folder = preg_replace('/\.zip$/i', '', $zipName);
        }
        if ($target !== '') {
            $folder = $target;
        }
    } else {
        bp_fail('invalid', "the $kind to install must be a ZIP file or a directory");
    }
    bp_valid_folder($folder, "the $kind folder");
    $dst = bp_confine($base . '/' . $folder, BP_ROOT, $folder, "the $kind folder", true);
    if (file_exists($dst) || is_link($dst)) {
        if ($ifAlready === 'skip') {
            bp_log("the $kind $folder is already installed: left as it is");
            return array($folder, $dst, true);
        }
        if ($ifAlready === 'error') {
            bp_fail('already_installed', "the $kind $folder is already installed (ifAlreadyInstalled: error)");
        }
        if (is_dir($src) !== (is_dir($dst) && !is_link($dst))) {
            bp_fail('invalid', 'cannot install ' . bp_site_name($dst) . ': a ' . (is_dir($dst) ? 'directory' : 'file') . ' of that name is in the way');
        }
    }
    bp_replace($src, $dst);
    bp_log("installed the $kind $folder from $what into " . bp_site_name($dst));
    if ($kind === 'plugin') {
        wp_clean_plugins_cache(false);
    } else {
        search_theme_directories(true);
        wp_clean_themes_cache(false);
    }
    return array($folder, $dst, false);
}

function bp_asset_data($new, $old)
{
    $d = bp_arg($new);
    if ($d === null && bp_arg($old) !== null) {
        bp_log("note: $old is deprecated; use $new");
        $d = bp_arg($old);
    }
    if ($d === null) {
        bp_fail('invalid', "the step needs $new");
    }
    return $d;
}

function bp_step_install_plugin()
{
    $o = bp_arg('options', array());
    $o = is_array($o) ? $o : array();
    $data = bp_asset_data('pluginData', 'pluginZipFile');
    list($folder, $dst) = bp_install_asset('plugin', $data,
        isset($o['targetFolderName']) ? $o['targetFolderName'] : null, bp_arg('ifAlreadyInstalled', 'overwrite'));
    if (bp_bool(isset($o['activate']) ? $o['activate'] : null, true)) {
        bp_activate_plugin($dst, $folder);
    }
}

function bp_step_install_theme()
{
    $o = bp_arg('options', array());
    $o = is_array($o) ? $o : array();
    $data = bp_asset_data('themeData', 'themeZipFile');
    list($folder) = bp_install_asset('theme', $data,
        isset($o['targetFolderName']) ? $o['targetFolderName'] : null, bp_arg('ifAlreadyInstalled', 'overwrite'));
    if (bp_bool(isset($o['activate']) ? $o['activate'] : null, true)) {
        bp_activate_theme($folder);
    }
    if (bp_bool(isset($o['importStarterContent']) ? $o['importStarterContent'] : null, false)) {
        // The Customizer must load with the theme active from the start:
        // a fresh process does that.
        bp_run_child_step('importThemeStarterContent', array('themeSlug' => $folder));
    }
}

// bp_run_child_step runs another step through this runner in a fresh
// process, and takes its log and its failure as this step's.
function bp_run_child_step($step, $args)
{
    $head = json_encode(array('step' => $step, 'args' => $args, 'blobs' => array(), 'url' => bp_req('url'),
        'adminUser' => bp_req('adminUser'), 'port' => bp_req('port')), JSON_UNESCAPED_SLASHES) . "\n";
    $proc = proc_open(array(PHP_BINARY, '-d', 'display_errors=stderr', '-d', 'memory_limit=512M', __DIR__ . '/run.php'),
        array(0 => array('pipe', 'r'), 1 => array('pipe', 'w'), 2 => array('pipe', 'w')), $pipes, '/srv/site');
    if (!is_resource($proc)) {
        bp_fail('php_error', "cannot start PHP for $step");
    }
    list($exit, $out, $err) = bp_pump($proc, $pipes, $head);
    $res = json_decode($out, true);
    if (!is_array($res)) {
        bp_fail('php_error', "$step stopped (exit status $exit): " . bp_excerpt(trim($err !== '' ? $err : $out), 1500));
    }
    if (isset($res['log']) && $res['log'] !== '') {
        bp_log($res['log']);
    }
    if (isset($res['error'])) {
        bp_fail($res['error']['code'], $res['error']['message']);
    }
}

// bp_activate_plugin activates a plugin given as a file or folder path
// (absolute, or relative to the plugins directory); a folder's main file
// is the one WordPress finds a plugin header in.
function bp_activate_plugin($pluginPath, $name = '')
{
    require_once ABSPATH . 'wp-admin/includes/plugin.php';
    $base = bp_plugins_dir();
    if (!is_string($pluginPath) || $pluginPath === '') {
        bp_fail('invalid', 'activatePlugin needs pluginPath');
    }
    if ($pluginPath[0] === '/') {
        $abs = bp_site_path($pluginPath, 'pluginPath');
    } else {
        $segs = bp_segments(str_replace('\\', '/', $pluginPath));
        if ($segs === false || !$segs || strpos($pluginPath, "\0") !== false) {
            bp_fail('path_outside_site', "pluginPath $pluginPath is outside the plugins directory");
        }
        $abs = bp_confine($base . '/' . implode('/', $segs), BP_ROOT, $pluginPath, 'pluginPath', false);
    }
    if (!bp_inside($abs, $base) || $abs === $base) {
        bp_fail('invalid', "pluginPath $pluginPath is not in the plugins directory (/wordpress/wp-content/plugins)");
    }
    $rel = substr($abs, strlen($base) + 1);
    wp_clean_plugins_cache(false);
    if (is_dir($abs)) {
        $found = get_plugins('/' . $rel);
        if (!$found) {
            bp_fail('activation_failed', "could not activate the plugin $rel: no PHP file in it has a Plugin Name header");
        }
        $main = array_keys($found)[0];
        if (isset($found[basename($rel) . '.php'])) {
            $main = basename($rel) . '.php';
        }
        $file = $rel . '/' . $main;
    } elseif (is_file($abs)) {
        $file = $rel;
    } else {
        bp_fail('not_found', "the plugin $pluginPath is not installed");
    }
    $label = $name !== '' && $name !== null ? "$name ($file)" : $file;
    if (is_plugin_active($file)) {
        bp_log("the plugin $label is already active");
        return $file;
    }
    $GLOBALS['bp']['phase'] = array('activation_failed', "Activating the plugin $label");
    $r = activate_plugin($file);
    $GLOBALS['bp']['phase'] = null;
    if (is_wp_error($r)) {
        $msg = trim(preg_replace('/\s+/', ' ', strip_tags($r->get_error_message())));
        $data = $r->get_error_data();
        if (is_string($data) && trim($data) !== '') {
            $msg .= ' ' . bp_excerpt(trim(strip_tags($data)), 500, false);
        }
        bp_fail('activation_failed', "could not activate the plugin $label: $msg");
    }
    if (!is_plugin_active($file)) {
        bp_fail('activation_failed', "could not activate the plugin $label: WordPress did not keep it active");
    }
    bp_log("activated the plugin $label");
    return $file;
}

function bp_step_activate_plugin()
{
    $p = bp_arg('pluginPath');
    $name = bp_arg('pluginName', '');
    bp_activate_plugin($p, is_string($name) ? $name : '');
}

function bp_activate_theme($folder)
{
    bp_valid_folder($folder, 'themeFolderName');
    $root = bp_themes_dir();
    $dir = bp_confine($root . '/' . $folder, BP_ROOT, $folder, 'the theme', false);
    if (!is_dir($dir)) {
        bp_fail('not_found', "could not activate the theme $folder: it is not installed (no /wordpress/wp-content/themes/$folder). Install it with the installTheme step");
    }
    search_theme_directories(true);
    wp_clean_themes_cache(false);
    $t = wp_get_theme($folder);
    if (!$t->exists()) {
        bp_fail('activation_failed', "could not activate the theme $folder: WordPress does not see a theme in it (style.css missing?)");
    }
    if ($t->errors() && $t->errors()->get_error_code() === 'theme_no_index') {
        // Playground switches to a theme without templates all the same
        // (a theme is often written file by file); so do we, and say so.
        bp_log("warning: WordPress finds the theme $folder incomplete: " . wp_strip_all_tags($t->errors()->get_error_message()));
    } elseif ($t->errors()) {
        bp_fail('activation_failed', "could not activate the theme $folder: " . wp_strip_all_tags($t->errors()->get_error_message()));
    }
    if (get_option('stylesheet') === $folder) {
        bp_log("the theme $folder is already active");
        return;
    }
    $GLOBALS['bp']['phase'] = array('activation_failed', "Activating the theme $folder");
    switch_theme($t->get_stylesheet());
    $GLOBALS['bp']['phase'] = null;
    if (get_option('stylesheet') !== $folder) {
        bp_fail('activation_failed', "the theme $folder could not be activated");
    }
    bp_log("activated the theme $folder (" . $t->get('Name') . ')');
}

function bp_step_activate_theme()
{
    bp_activate_theme(bp_arg('themeFolderName'));
}

// ---- Starter content -----------------------------------------------------------

// Before WordPress loads: as Playground does, the request is made a
// Customizer save by the admin, so that WordPress sets up
// $wp_customize for the theme.
function bp_starter_content_preload($slug)
{
    $GLOBALS['bp_starter_slug'] = is_string($slug) ? $slug : '';
    $GLOBALS['wp_filter']['plugins_loaded'][0][] = array('function' => 'bp_starter_plugins_loaded', 'accepted_args' => 1);
}

function bp_starter_plugins_loaded()
{
    bp_become_admin();
    // Before the Customizer previews a theme (and filters the option).
    $GLOBALS['bp_active_theme'] = get_option('stylesheet');
    add_filter('pre_option_fresh_site', '__return_true');
    $_REQUEST['wp_customize'] = 'on';
    $_REQUEST['customize_theme'] = $GLOBALS['bp_starter_slug'] !== '' ? $GLOBALS['bp_starter_slug'] : get_stylesheet();
    $_REQUEST['action'] = 'customize_save';
    add_filter('wp_doing_ajax', '__return_true');
    $_GET = $_REQUEST;
}

function bp_step_import_starter_content()
{
    global $wp_customize;
    $slug = bp_arg('themeSlug', '');
    $active = isset($GLOBALS['bp_active_theme']) ? $GLOBALS['bp_active_theme'] : get_option('stylesheet');
    if (is_string($slug) && $slug !== '' && $slug !== $active) {
        bp_fail('invalid', "importThemeStarterContent: the theme $slug is not the active theme ($active); activate it first");
    }
    if (!($wp_customize instanceof WP_Customize_Manager)) {
        bp_fail('php_error', 'importThemeStarterContent: the Customizer did not load');
    }
    $content = get_theme_starter_content();
    if (!$content) {
        bp_log("the theme $active has no starter content: nothing imported");
        return;
    }
    $GLOBALS['bp']['phase'] = array('php_error', 'Importing the starter content');
    $wp_customize->import_theme_starter_content();
    $id = $wp_customize->changeset_post_id();
    if ($id) {
        wp_publish_post($id);
    }
    $GLOBALS['bp']['phase'] = null;
    $parts = array();
    foreach ($content as $k => $v) {
        $parts[] = is_array($v) ? count($v) . " $k" : $k;
    }
    bp_log("imported the starter content of $active: " . implode(', ', $parts));
}

// ---- request ----------------------------------------------------------------

// request: an HTTP request to the site's own web server (inside its
// container); the URL must be a path or on the site's host. Unlike
// Playground, it carries no login cookie, and only a status of 500 or
// more fails the step.
function bp_step_request()
{
    $r = bp_arg('request');
    if (!is_array($r) || !isset($r['url']) || !is_string($r['url'])) {
        bp_fail('invalid', 'request needs request.url');
    }
    $site = parse_url(bp_site_url());
    $siteHost = isset($site['host']) ? $site['host'] : 'localhost';
    $hostHeader = $siteHost . (isset($site['port']) ? ':' . $site['port'] : '');
    $url = $r['url'];
    if (preg_match('#^[a-z][a-z0-9+.-]*://#i', $url)) {
        $u = parse_url($url);
        if (!$u || !isset($u['host']) || strcasecmp($u['host'], $siteHost) !== 0 || !in_array(strtolower($u['scheme']), array('http', 'https'), true)) {
            bp_fail('invalid', "request: $url is not on this site ($siteHost); use a path like /wp-admin/");
        }
        $path = (isset($u['path']) ? $u['path'] : '/') . (isset($u['query']) ? '?' . $u['query'] : '');
    } elseif (strpos($url, '//') === 0) {
        bp_fail('invalid', "request: $url is not a path of this site");
    } else {
        $path = $url === '' || $url[0] !== '/' ? '/' . $url : $url;
    }
    if (preg_match('/[\x00-\x20\x7f]/', $path)) {
        bp_fail('invalid', 'request: the URL has spaces or control characters');
    }
    $method = isset($r['method']) ? strtoupper((string) $r['method']) : 'GET';
    if (!preg_match('/^[A-Z]{1,16}$/', $method)) {
        bp_fail('invalid', 'request: bad method');
    }
    if (!function_exists('curl_init')) {
        bp_fail('unsupported', 'request: PHP has no curl extension here');
    }
    $headers = array('Host: ' . $hostHeader);
    if (isset($site['scheme']) && $site['scheme'] === 'https') {
        $headers[] = 'X-Forwarded-Proto: https';
    }
    foreach ((isset($r['headers']) && is_array($r['headers']) ? $r['headers'] : array()) as $k => $v) {
        $k = (string) $k;
        if (strcasecmp($k, 'host') === 0 || !preg_match('/^[A-Za-z0-9!#$%&\'*+.^_`|~-]+$/', $k) || preg_match('/[\r\n]/', (string) $v)) {
            continue;
        }
        $headers[] = "$k: $v";
    }
    $port = (int) bp_req('port', 8080);
    $ch = curl_init('http://127.0.0.1:' . $port . $path);
    $location = '';
    curl_setopt_array($ch, array(
        CURLOPT_CUSTOMREQUEST => $method,
        CURLOPT_HTTPHEADER => $headers,
        CURLOPT_RETURNTRANSFER => true,
        CURLOPT_FOLLOWLOCATION => false,
        CURLOPT_TIMEOUT => 300,
        CURLOPT_CONNECTTIMEOUT => 10,
        CURLOPT_PROTOCOLS => CURLPROTO_HTTP,
        CURLOPT_HEADERFUNCTION => function ($ch, $h) use (&$location) {
            if (stripos($h, 'location:') === 0) {
                $location = trim(substr($h, 9));
            }
            return strlen($h);
        },
    ));
    if (isset($r['body'])) {
        $body = $r['body'];
        if (is_array($body)) {
            $fields = array();
            foreach ($body as $k => $v) {
                if (!is_scalar($v)) {
                    bp_fail('unsupported', 'request: only text form fields are supported in body');
                }
                $fields[(string) $k] = (string) $v;
            }
            curl_setopt($ch, CURLOPT_POSTFIELDS, $fields);
        } else {
            curl_setopt($ch, CURLOPT_POSTFIELDS, (string) $body);
        }
    }
    $resp = curl_exec($ch);
    if ($resp === false) {
        bp_fail('request_failed', "request $method $path failed: " . curl_error($ch));
    }
    $status = (int) curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    curl_close($ch);
    bp_log("$method $path → HTTP $status" . ($location !== '' ? " (Location: $location)" : ''));
    if ($resp !== '') {
        bp_log(bp_excerpt($resp, 2048, false));
    }
    if ($status >= 500) {
        bp_fail('request_failed', "request $method $path: the site answered HTTP $status");
    }
}

// ---- Importers ----------------------------------------------------------------

function bp_step_import_wxr()
{
    require_once __DIR__ . '/wxr.php';
    bp_wxr_import();
}

function bp_step_wp_cli()
{
    require_once __DIR__ . '/wpcli.php';
    bp_wpcli_run();
}
