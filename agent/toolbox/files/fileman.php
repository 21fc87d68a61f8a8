<?php
// The sandbox's file-manager API. The agent runs it with `php -r` as
// www-data inside the site's container and hands it one JSON request on
// stdin: {op, path, from, to, contentBase64, maxBytes}. It answers one JSON
// object on stdout: the result, or {"error": {"code", "message"}}.
//
// Paths arrive already checked by the agent (relative, no "..", no NUL);
// they are checked again here, and every existing component is resolved so
// that a symlink planted inside the site cannot lead out of the WordPress
// root. Whatever slips past runs as www-data in the site's own container.

const FM_ROOT = '/srv/site/wordpress';

function fm_out($v) { fwrite(STDOUT, json_encode($v, JSON_UNESCAPED_SLASHES)); exit(0); }
function fm_fail($code, $msg) { fm_out(['error' => ['code' => $code, 'message' => $msg]]); }

function fm_parts($p) {
    if (!is_string($p) || strpos($p, "\0") !== false) fm_fail('invalid', 'path contains a NUL byte');
    if ($p !== '' && $p[0] === '/') fm_fail('invalid', 'absolute path');
    $parts = [];
    foreach (explode('/', $p) as $seg) {
        if ($seg === '' || $seg === '.') continue;
        if ($seg === '..') fm_fail('invalid', 'a ".." segment leaves the WordPress root');
        $parts[] = $seg;
    }
    return $parts;
}

function fm_inside($real) {
    $root = realpath(FM_ROOT);
    return $real === $root || strncmp($real, $root . '/', strlen($root) + 1) === 0;
}

// fm_path checks a relative path and returns its absolute form. Every
// component that exists must not be a symlink that resolves outside the
// root (or nowhere); with $followLast false the last one may be, because
// the operation acts on the link itself (delete, rename) and never
// follows it.
function fm_path($p, $allowRoot = false, $followLast = true) {
    $parts = fm_parts($p);
    if (!$allowRoot && count($parts) === 0) fm_fail('invalid', 'the WordPress root itself cannot be the target');
    $cur = FM_ROOT;
    foreach ($parts as $i => $seg) {
        $cur .= '/' . $seg;
        clearstatcache(true, $cur);
        if (!$followLast && $i === count($parts) - 1) break;
        if (is_link($cur)) {
            $t = realpath($cur);
            if ($t === false || !fm_inside($t)) fm_fail('invalid', 'the path goes through a symlink that leads out of the WordPress root');
        } elseif (!file_exists($cur)) {
            break;
        }
    }
    return count($parts) ? FM_ROOT . '/' . implode('/', $parts) : FM_ROOT;
}

function fm_rel($abs) { return ltrim(substr($abs, strlen(FM_ROOT)), '/'); }

function fm_exists($abs) { return is_link($abs) || file_exists($abs); }

// fm_full fails with disk_full when the site's disk has less than $need
// bytes (and some slack) left: the reason a write failed, told as such.
function fm_full($need = 0) {
    $free = @disk_free_space(FM_ROOT);
    if ($free !== false && $free < $need + 262144) fm_fail('disk_full', "the site's disk is full");
}

function fm_parent($abs) {
    $dir = dirname($abs);
    if (!is_dir($dir) && !@mkdir($dir, 0755, true)) { fm_full(); fm_fail('invalid', 'cannot create the parent directory of ' . fm_rel($abs)); }
}

function fm_write($abs, $data) {
    if (is_dir($abs) && !is_link($abs)) fm_fail('conflict', fm_rel($abs) . ' is a directory');
    fm_parent($abs);
    // Written beside the target and renamed over it, so a reader never sees
    // half a file and a symlink at the target is replaced, not followed.
    $tmp = dirname($abs) . '/.fm-' . bin2hex(random_bytes(6));
    if (@file_put_contents($tmp, $data) === false) {
        @unlink($tmp);
        fm_full(strlen($data));
        fm_fail('invalid', 'cannot write ' . fm_rel($abs));
    }
    @chmod($tmp, 0644);
    if (!@rename($tmp, $abs)) { @unlink($tmp); fm_fail('invalid', 'cannot write ' . fm_rel($abs)); }
    return ['ok' => true, 'path' => fm_rel($abs), 'sizeBytes' => strlen($data)];
}

function fm_remove($abs) {
    if (is_dir($abs) && !is_link($abs)) {
        foreach (scandir($abs) as $e) {
            if ($e === '.' || $e === '..') continue;
            if (!fm_remove($abs . '/' . $e)) return false;
        }
        return @rmdir($abs);
    }
    return @unlink($abs);
}

function fm_copy($from, $to) {
    if (is_link($from)) return @symlink(readlink($from), $to);
    if (is_dir($from)) {
        if (!@mkdir($to, 0755)) return false;
        foreach (scandir($from) as $e) {
            if ($e === '.' || $e === '..') continue;
            if (!fm_copy($from . '/' . $e, $to . '/' . $e)) return false;
        }
        return true;
    }
    return @copy($from, $to);
}

function fm_b64($s) {
    $d = base64_decode(is_string($s) ? $s : '', true);
    if ($d === false) fm_fail('invalid', 'contentBase64 is not base64');
    return $d;
}

$req = json_decode(stream_get_contents(STDIN), true);
if (!is_array($req)) fm_fail('invalid', 'bad request');
$max = isset($req['maxBytes']) ? (int)$req['maxBytes'] : 33554432;

switch ($req['op'] ?? '') {
case 'list':
    $abs = fm_path($req['path'] ?? '', true);
    if (!is_dir($abs)) fm_fail(fm_exists($abs) ? 'invalid' : 'not_found', (fm_rel($abs) ?: '/') . ' is not a directory');
    $entries = [];
    $truncated = false;
    foreach (scandir($abs) as $e) {
        if ($e === '.' || $e === '..') continue;
        if (count($entries) >= 10000) { $truncated = true; break; }
        $st = @lstat($abs . '/' . $e);
        if ($st === false) continue;
        $type = is_link($abs . '/' . $e) ? 'symlink' : (is_dir($abs . '/' . $e) ? 'directory' : 'file');
        $entries[] = ['name' => $e, 'type' => $type, 'sizeBytes' => $type === 'file' ? $st['size'] : 0,
            'modifiedAt' => gmdate('Y-m-d\TH:i:s\Z', $st['mtime'])];
    }
    fm_out(['path' => fm_rel($abs), 'entries' => $entries, 'truncated' => $truncated]);
case 'read':
    $abs = fm_path($req['path'] ?? '');
    if (!fm_exists($abs)) fm_fail('not_found', fm_rel($abs) . ' does not exist');
    if (!is_file($abs)) fm_fail('invalid', fm_rel($abs) . ' is not a file');
    $size = filesize($abs);
    if ($size > $max) fm_fail('too_large', fm_rel($abs) . " is $size bytes; the limit is $max");
    $data = @file_get_contents($abs);
    if ($data === false) fm_fail('invalid', 'cannot read ' . fm_rel($abs));
    fm_out(['path' => fm_rel($abs), 'contentBase64' => base64_encode($data), 'sizeBytes' => strlen($data)]);
case 'write':
    fm_out(fm_write(fm_path($req['path'] ?? ''), fm_b64($req['contentBase64'] ?? '')));
case 'upload':
    $abs = fm_path($req['path'] ?? '', true);
    if (is_dir($abs) && !is_link($abs)) {
        $name = basename((string)($req['filename'] ?? ''));
        if ($name === '' || $name === '.' || $name === '..') fm_fail('invalid', 'the upload has no file name; give a file path');
        $abs = fm_path(fm_rel($abs) . '/' . $name);
    } elseif ($abs === FM_ROOT) {
        fm_fail('invalid', 'the WordPress root itself cannot be the target');
    }
    fm_out(fm_write($abs, fm_b64($req['contentBase64'] ?? '')));
case 'mkdir':
    $abs = fm_path($req['path'] ?? '');
    if (fm_exists($abs)) fm_fail('conflict', fm_rel($abs) . ' already exists');
    if (!@mkdir($abs, 0755, true)) { fm_full(); fm_fail('invalid', 'cannot create ' . fm_rel($abs)); }
    fm_out(['ok' => true, 'path' => fm_rel($abs)]);
case 'delete':
    $abs = fm_path($req['path'] ?? '', false, false);
    if (!fm_exists($abs)) fm_fail('not_found', fm_rel($abs) . ' does not exist');
    if (!fm_remove($abs)) fm_fail('invalid', 'cannot delete all of ' . fm_rel($abs));
    fm_out(['ok' => true, 'path' => fm_rel($abs)]);
case 'rename':
case 'copy':
    $from = fm_path($req['from'] ?? '', false, $req['op'] !== 'rename');
    $to = fm_path($req['to'] ?? '');
    if (!fm_exists($from)) fm_fail('not_found', fm_rel($from) . ' does not exist');
    if (fm_exists($to)) fm_fail('conflict', fm_rel($to) . ' already exists');
    if ($to === $from || strncmp($to, $from . '/', strlen($from) + 1) === 0) fm_fail('invalid', 'cannot ' . $req['op'] . ' a directory into itself');
    fm_parent($to);
    if ($req['op'] === 'rename') {
        if (!@rename($from, $to)) fm_fail('invalid', 'cannot rename ' . fm_rel($from));
    } elseif (!fm_copy($from, $to)) {
        $free = @disk_free_space(FM_ROOT); // before the partial copy goes
        fm_remove($to);
        if ($free !== false && $free < 262144) fm_fail('disk_full', "the site's disk is full");
        fm_fail('invalid', 'cannot copy ' . fm_rel($from));
    }
    fm_out(['ok' => true, 'from' => fm_rel($from), 'to' => fm_rel($to)]);
default:
    fm_fail('invalid', 'unknown operation');
}
