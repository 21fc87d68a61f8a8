<?php
// Runs one Blueprint step in this sandbox. The agent execs it as the
// site's user inside the site's container (cwd /srv/site):
//
//   php -d display_errors=stderr -d memory_limit=512M /srv/site/conf/blueprint/run.php
//
// stdin is one JSON line (the header: step, args, blobs, url, adminUser,
// port, and per step attachments, fetched or languagePacks), then the
// blobs back to back, exactly blobs[i] bytes each. Resources in args are
// references: {"$file": i, "name"} (blob i), {"$dir": {"name", "files":
// {relpath: i}}} (a tree of blobs) or {"$vfs": path} (a file already in
// the site).
//
// stdout is exactly one JSON object: {"ok": true, "log"} (a login step
// adds "user") or {"error": {"code", "message"}, "log"}. Whatever
// WordPress or a plugin prints is kept out of it; PHP's warnings go to
// stderr. The exit status is 0 either way.
//
// The step is the tenant's, so it is not trusted: every path a step
// writes, moves, copies, deletes or reads stays inside the site's
// WordPress directory, links included, and ZIPs are checked before they
// are unpacked. Code must run on PHP 7.4 and WordPress 5.7 (the oldest
// image) as well as on the newest.

error_reporting(E_ALL);
@set_time_limit(0);
ignore_user_abort(true);

const BP_ROOT = '/srv/site/wordpress';
const BP_TMP = '/srv/site/tmp';
const BP_STATE = '/srv/site/state';
const BP_LOG_MAX = 65536;

$GLOBALS['bp'] = array(
    'log' => '',          // what the step reports
    'log_dropped' => 0,   // bytes of log not kept
    'out' => '',          // what WordPress and plugins printed (a bounded tail)
    'result' => null,     // the answer, once the step is done
    'cleanup' => array(), // staging and temporary paths to remove at the end
    'phase' => null,      // array(code, what) a fatal error is reported as
    'blobs' => array(),   // blob index => temporary file
    'req' => null,
);

// Output of WordPress and plugins: captured, never written to stdout (the
// answer is written with fwrite(STDOUT), which no buffer holds).
ob_start('bp_capture_output');
register_shutdown_function('bp_shutdown');

function bp_capture_output($buf)
{
    if ($buf !== '') {
        $o = $GLOBALS['bp']['out'] . $buf;
        $GLOBALS['bp']['out'] = strlen($o) > 8192 ? substr($o, -8192) : $o;
    }
    return '';
}

// bp_log adds a line to the step's log. The log is bounded: past a few
// times its limit, lines are counted, not kept.
function bp_log($line)
{
    $line = rtrim((string) $line, "\n") . "\n";
    if (strlen($GLOBALS['bp']['log']) + strlen($line) > 2 * BP_LOG_MAX) {
        $GLOBALS['bp']['log_dropped'] += strlen($line);
        return;
    }
    $GLOBALS['bp']['log'] .= $line;
}

// bp_fail ends the step with an error; bp_done ends it with success. Both
// leave through exit so they work from anywhere, WordPress hooks included:
// the shutdown function answers.
function bp_fail($code, $message)
{
    $GLOBALS['bp']['result'] = array('error' => array('code' => $code, 'message' => $message));
    exit(0);
}

function bp_done($extra = array())
{
    $GLOBALS['bp']['result'] = array_merge(array('ok' => true), $extra);
    exit(0);
}

function bp_shutdown()
{
    $bp = &$GLOBALS['bp'];
    // Take every output buffer (ours last): nothing may precede the answer.
    while (ob_get_level() > 0) {
        $s = ob_get_contents();
        if ($s !== false && $s !== '') {
            bp_capture_output($s);
        }
        if (!@ob_end_clean()) {
            break;
        }
    }
    $out = trim($bp['out']);
    $stopped = $bp['result'] === null;
    if ($stopped) {
        $err = error_get_last();
        $fatal = array(E_ERROR, E_PARSE, E_CORE_ERROR, E_COMPILE_ERROR, E_USER_ERROR, E_RECOVERABLE_ERROR);
        $phase = $bp['phase'] ?: array('php_error', 'The step');
        if ($err && in_array($err['type'], $fatal, true)) {
            $msg = $err['message'];
            if (stripos($msg, 'Allowed memory size') !== false) {
                $msg .= ' (the step may use at most 512 MB)';
            }
            $bp['result'] = array('error' => array('code' => $phase[0],
                'message' => $phase[1] . ' stopped with a PHP fatal error: ' . $msg . ' in ' . bp_site_name($err['file']) . ' on line ' . $err['line']));
        } else {
            $why = $out !== '' ? ': ' . bp_excerpt(strip_tags($out), 300) : '';
            $bp['result'] = array('error' => array('code' => $phase[0],
                'message' => $phase[1] . ' stopped before finishing (WordPress or a plugin ended the process)' . $why));
        }
    }
    if ($out !== '') {
        bp_log("output:\n" . bp_excerpt($out, 4000));
    }
    foreach (array_reverse($bp['cleanup']) as $p) {
        bp_rmtree($p);
    }
    $log = $bp['log'];
    if (strlen($log) > BP_LOG_MAX || $bp['log_dropped'] > 0) {
        $total = strlen($log) + $bp['log_dropped'];
        $log = substr($log, 0, BP_LOG_MAX - 200) . "\n… (log truncated: " . $total . " bytes in all)\n";
    }
    $answer = $bp['result'];
    $answer['log'] = $log;
    $json = json_encode($answer, JSON_UNESCAPED_SLASHES | JSON_INVALID_UTF8_SUBSTITUTE | JSON_PARTIAL_OUTPUT_ON_ERROR);
    fwrite(STDOUT, $json);
    fflush(STDOUT);
    // Destructors and WordPress's own shutdown hook may still print.
    ob_start(function () { return ''; });
    if ($stopped) {
        // A fatal error (or an exit inside WordPress) was answered above:
        // the exit status says the runner itself worked, and WordPress's
        // fatal error handler (recovery mode, its mails) does not run.
        exit(0);
    }
}

// bp_excerpt shortens a text for a message: its end when $tail, else its start.
function bp_excerpt($s, $max, $tail = true)
{
    $s = (string) $s;
    if (strlen($s) <= $max) {
        return $s;
    }
    return $tail ? '…' . substr($s, -$max) : substr($s, 0, $max) . '…';
}

// bp_site_name shows a path as the Blueprint knows it (/wordpress/...).
function bp_site_name($p)
{
    $p = (string) $p;
    if ($p === BP_ROOT || strpos($p, BP_ROOT . '/') === 0) {
        return '/wordpress' . substr($p, strlen(BP_ROOT));
    }
    if (strpos($p, BP_TMP . '/') === 0) {
        return '/tmp' . substr($p, strlen(BP_TMP));
    }
    return $p;
}

function bp_rmtree($p)
{
    if (is_link($p) || (file_exists($p) && !is_dir($p))) {
        return @unlink($p);
    }
    if (!is_dir($p)) {
        return true;
    }
    foreach ((array) @scandir($p) as $e) {
        if ($e !== '.' && $e !== '..' && $e !== false) {
            bp_rmtree($p . '/' . $e);
        }
    }
    return @rmdir($p);
}

// bp_disk_full reports whether a failed write is for want of room.
function bp_disk_full($dir = BP_ROOT)
{
    $free = @disk_free_space($dir);
    return $free !== false && $free < (1 << 20);
}

// bp_write_failed ends the step after a write that failed: disk_full when
// the disk is (nearly) full, else a plain error naming the file.
function bp_write_failed($path, $what = 'write')
{
    $dir = is_dir($path) ? $path : dirname($path);
    while (!is_dir($dir) && $dir !== '/' && $dir !== '.') {
        $dir = dirname($dir);
    }
    if (bp_disk_full($dir)) {
        bp_fail('disk_full', "the site's disk is full: cannot $what " . bp_site_name($path));
    }
    $e = error_get_last();
    bp_fail('write_failed', "cannot $what " . bp_site_name($path) . ($e ? ': ' . $e['message'] : ''));
}

// ---- The request ----------------------------------------------------------

function bp_read_request()
{
    $line = fgets(STDIN);
    if ($line === false) {
        bp_fail('invalid', 'no step on stdin');
    }
    $req = json_decode($line, true);
    if (!is_array($req) || !isset($req['step']) || !is_string($req['step'])) {
        bp_fail('invalid', 'the step header is not a JSON object with a step name');
    }
    if (!isset($req['args']) || !is_array($req['args'])) {
        $req['args'] = array();
    }
    $sizes = isset($req['blobs']) && is_array($req['blobs']) ? $req['blobs'] : array();
    if ($sizes) {
        $dir = BP_TMP . '/bp-' . bin2hex(random_bytes(8));
        if (!@mkdir($dir, 0700)) {
            bp_write_failed($dir, 'create');
        }
        $GLOBALS['bp']['cleanup'][] = $dir;
        foreach ($sizes as $i => $n) {
            $n = (int) $n;
            $path = $dir . '/' . (int) $i;
            $f = @fopen($path, 'xb');
            if (!$f) {
                bp_write_failed($path, 'create');
            }
            $copied = $n > 0 ? stream_copy_to_stream(STDIN, $f, $n) : 0;
            if (!fclose($f) || $copied !== $n) {
                if (bp_disk_full(BP_TMP)) {
                    bp_fail('disk_full', "the site's disk is full: the step's files do not fit in /tmp");
                }
                if ($copied !== $n && feof(STDIN)) {
                    bp_fail('invalid', "stdin ended inside blob $i ($copied of $n bytes)");
                }
                bp_write_failed($path, 'write');
            }
            $GLOBALS['bp']['blobs'][(int) $i] = $path;
        }
    }
    return $req;
}

// bp_blob is the temporary file of blob $i.
function bp_blob($i, $what)
{
    if (!is_int($i) && !(is_string($i) && ctype_digit($i)) && !is_float($i)) {
        bp_fail('invalid', "$what refers to no file");
    }
    $i = (int) $i;
    if (!isset($GLOBALS['bp']['blobs'][$i])) {
        bp_fail('invalid', "$what refers to file #$i, which the step did not bring");
    }
    return $GLOBALS['bp']['blobs'][$i];
}

function bp_is_file_ref($v)
{
    return is_array($v) && (array_key_exists('$file', $v) || array_key_exists('$vfs', $v));
}

function bp_is_dir_ref($v)
{
    return is_array($v) && isset($v['$dir']) && is_array($v['$dir']);
}

// bp_file_ref resolves a file reference to a readable path and a name.
function bp_file_ref($v, $what)
{
    if (is_array($v) && array_key_exists('$file', $v)) {
        $name = isset($v['name']) && is_string($v['name']) ? $v['name'] : 'file';
        return array(bp_blob($v['$file'], $what), $name);
    }
    if (is_array($v) && array_key_exists('$vfs', $v)) {
        $path = bp_read_path($v['$vfs'], $what);
        if (!is_file($path)) {
            bp_fail('not_found', "$what: " . $v['$vfs'] . ' is not a file in the site');
        }
        return array($path, basename($path));
    }
    bp_fail('invalid', "$what must be a file");
}

// bp_text reads a property that is either an inline string or a file.
function bp_text($v, $what)
{
    if (is_string($v)) {
        return $v;
    }
    if (is_array($v) && isset($v['content']) && is_string($v['content'])) {
        return $v['content']; // runPHP's {filename, content} form
    }
    if (bp_is_file_ref($v)) {
        list($path) = bp_file_ref($v, $what);
        $s = @file_get_contents($path);
        if ($s === false) {
            bp_fail('not_found', "$what: cannot read the file");
        }
        return $s;
    }
    if ($v === null) {
        bp_fail('invalid', "$what is missing");
    }
    bp_fail('invalid', "$what must be text or a file");
}

function bp_arg($name, $default = null)
{
    $a = $GLOBALS['bp']['req']['args'];
    return array_key_exists($name, $a) && $a[$name] !== null ? $a[$name] : $default;
}

function bp_req($name, $default = null)
{
    $r = $GLOBALS['bp']['req'];
    return array_key_exists($name, $r) && $r[$name] !== null ? $r[$name] : $default;
}

// bp_bool reads a Blueprint boolean ("true"/"false"/1/0 accepted too).
function bp_bool($v, $default)
{
    if ($v === null) {
        return $default;
    }
    if (is_string($v)) {
        return !in_array(strtolower($v), array('', '0', 'false', 'no', 'off'), true);
    }
    return (bool) $v;
}

function bp_site_url()
{
    return rtrim((string) bp_req('url', 'http://localhost'), '/');
}

require __DIR__ . '/fs.php';
require __DIR__ . '/steps.php';

$GLOBALS['bp']['req'] = bp_read_request();
$bp_step = $GLOBALS['bp']['req']['step'];

// How much of WordPress the step needs: none, its database only
// (SHORTINIT), all of it, all of it as the admin screens have it, or the
// Customizer (starter content).
$bp_mode = bp_wordpress_mode($bp_step, $GLOBALS['bp']['req']['args']);
if ($bp_mode !== 'none') {
    $bp_u = parse_url(bp_site_url());
    $_SERVER['HTTP_HOST'] = (isset($bp_u['host']) ? $bp_u['host'] : 'localhost') . (isset($bp_u['port']) ? ':' . $bp_u['port'] : '');
    $_SERVER['SERVER_NAME'] = isset($bp_u['host']) ? $bp_u['host'] : 'localhost';
    $_SERVER['SERVER_PORT'] = isset($bp_u['port']) ? (string) $bp_u['port'] : ((isset($bp_u['scheme']) && $bp_u['scheme'] === 'https') ? '443' : '80');
    if (isset($bp_u['scheme']) && $bp_u['scheme'] === 'https') {
        $_SERVER['HTTPS'] = 'on';
    }
    $_SERVER['REQUEST_METHOD'] = 'GET';
    $_SERVER['REQUEST_URI'] = '/';
    if ($bp_mode === 'db') {
        define('SHORTINIT', true);
    } elseif ($bp_mode === 'admin') {
        define('WP_ADMIN', true);
        $_SERVER['REQUEST_URI'] = '/wp-admin/';
    } elseif ($bp_mode === 'customize') {
        bp_starter_content_preload(bp_arg('themeSlug', ''));
    }
    unset($bp_u);
    $GLOBALS['bp']['phase'] = array('php_error', 'Loading WordPress');
    // Global scope: WordPress's files declare their globals as locals.
    require BP_ROOT . '/wp-load.php';
    $GLOBALS['bp']['phase'] = null;
    if ($bp_mode !== 'db') {
        bp_become_admin();
    }
}
bp_run_step($bp_step);
bp_done();
