<?php
// Paths, the file steps and ZIPs of the Blueprint runner (see run.php).
//
// A Blueprint names files as Playground sees them: /wordpress/... is the
// site's WordPress directory (/srv/site/wordpress here), a relative path
// is relative to it, /tmp/... is the site's temporary directory (read
// only, for vfs resources). Every path is normalised lexically first
// (. and .. resolved, anything above the root refused), then its deepest
// existing ancestor is resolved with realpath() and must still be inside:
// a link the site made must not lead a step out.

const BP_MAX_ZIP_ENTRIES = 50000;
const BP_MAX_ZIP_BYTES = 1073741824; // 1 GiB uncompressed

function bp_inside($path, $root)
{
    return $path === $root || strpos($path, $root . '/') === 0;
}

// bp_segments normalises a path below a root lexically; false when it
// climbs above the root.
function bp_segments($rel)
{
    $segs = array();
    foreach (explode('/', $rel) as $s) {
        if ($s === '' || $s === '.') {
            continue;
        }
        if ($s === '..') {
            if (!$segs) {
                return false;
            }
            array_pop($segs);
            continue;
        }
        $segs[] = $s;
    }
    return $segs;
}

// bp_site_path maps a Blueprint path to the site's WordPress directory and
// confines it there. With $nofollow the last component is not followed
// (rm, mv and the like act on a link itself); its directory still is.
// The answer is the path with every existing link resolved.
function bp_site_path($p, $what = 'path', $nofollow = false)
{
    if (!is_string($p) || $p === '') {
        bp_fail('invalid', "$what is missing");
    }
    if (strpos($p, "\0") !== false) {
        bp_fail('path_outside_site', "$what contains a NUL byte");
    }
    if ($p === '/wordpress' || strpos($p, '/wordpress/') === 0) {
        $rel = substr($p, strlen('/wordpress'));
    } elseif (bp_inside($p, BP_ROOT)) {
        $rel = substr($p, strlen(BP_ROOT));
    } elseif ($p[0] === '/') {
        bp_fail('path_outside_site', "$what $p is outside the site's WordPress directory (/wordpress)");
    } else {
        $rel = '/' . $p;
    }
    $segs = bp_segments($rel);
    if ($segs === false) {
        bp_fail('path_outside_site', "$what $p is outside the site's WordPress directory (/wordpress)");
    }
    $abs = BP_ROOT . ($segs ? '/' . implode('/', $segs) : '');
    return bp_confine($abs, BP_ROOT, $p, $what, $nofollow);
}

// bp_confine resolves the deepest existing ancestor of $abs (lexically
// clean, under $root) and refuses it outside $root.
function bp_confine($abs, $root, $shown, $what, $nofollow)
{
    $check = $abs;
    $last = '';
    if ($nofollow && $abs !== $root) {
        $check = dirname($abs);
        $last = '/' . basename($abs);
    }
    $cur = $check;
    while (true) {
        if (is_link($cur) || file_exists($cur)) {
            $real = realpath($cur);
            if ($real === false) {
                bp_fail('path_outside_site', "$what $shown goes through a broken link (" . bp_site_name($cur) . ')');
            }
            if (!bp_inside($real, $root)) {
                bp_fail('path_outside_site', "$what $shown leads outside the site's WordPress directory (through a symbolic link)");
            }
            return $real . substr($check, strlen($cur)) . $last;
        }
        if ($cur === $root || $cur === '/' || $cur === '.') {
            bp_fail('not_found', "the site's directory " . bp_site_name($root) . ' is missing');
        }
        $cur = dirname($cur);
    }
}

// bp_read_path confines a path a step only reads: in the site's WordPress
// directory, or in its temporary directory (/tmp/... in Playground).
function bp_read_path($p, $what)
{
    if (is_string($p) && ($p === '/tmp' || strpos($p, '/tmp/') === 0 || bp_inside($p, BP_TMP))) {
        if (strpos($p, "\0") !== false) {
            bp_fail('path_outside_site', "$what contains a NUL byte");
        }
        $rel = strpos($p, '/tmp') === 0 ? substr($p, 4) : substr($p, strlen(BP_TMP));
        $segs = bp_segments($rel);
        if ($segs === false) {
            bp_fail('path_outside_site', "$what $p is outside the site's /tmp");
        }
        return bp_confine(BP_TMP . ($segs ? '/' . implode('/', $segs) : ''), BP_TMP, $p, $what, false);
    }
    return bp_site_path($p, $what);
}

// bp_clean_rel checks a path inside a tree (a $dir resource, a ZIP entry):
// relative, no .. segment, no NUL.
function bp_clean_rel($rel)
{
    if (!is_string($rel) || $rel === '' || strpos($rel, "\0") !== false) {
        return false;
    }
    $rel = str_replace('\\', '/', $rel);
    if ($rel[0] === '/' || preg_match('#^[A-Za-z]:#', $rel)) {
        return false;
    }
    foreach (explode('/', $rel) as $s) {
        if ($s === '..') {
            return false;
        }
    }
    $segs = bp_segments($rel);
    return $segs ? implode('/', $segs) : false;
}

// bp_safe_entry checks a ZIP entry's name: not absolute, no .. segment
// (either slash), no NUL.
function bp_safe_entry($n)
{
    if (!is_string($n) || $n === '' || strpos($n, "\0") !== false || $n[0] === '/' || $n[0] === '\\' || preg_match('#^[A-Za-z]:#', $n)) {
        return false;
    }
    foreach (preg_split('#[/\\\\]#', $n) as $s) {
        if ($s === '..') {
            return false;
        }
    }
    return true;
}

// bp_mkdirs makes a directory and its parents (all already confined).
function bp_mkdirs($dir)
{
    if (is_dir($dir)) {
        return;
    }
    if (file_exists($dir) || is_link($dir)) {
        bp_fail('invalid', bp_site_name($dir) . ' exists and is not a directory');
    }
    if (!@mkdir($dir, 0755, true) && !is_dir($dir)) {
        bp_write_failed($dir, 'create the directory');
    }
}

// bp_put_file writes a file (from a path, or data) through a temporary
// file in the same directory renamed over the target: the web server
// never sees half a file.
function bp_put_file($dst, $srcPath, $data = null)
{
    if (is_dir($dst) && !is_link($dst)) {
        bp_fail('invalid', bp_site_name($dst) . ' is a directory');
    }
    bp_mkdirs(dirname($dst));
    $tmp = dirname($dst) . '/.bp-' . bin2hex(random_bytes(6)) . '.tmp';
    $ok = $srcPath !== null ? @copy($srcPath, $tmp) : @file_put_contents($tmp, (string) $data) === strlen((string) $data);
    if (!$ok || !@rename($tmp, $dst)) {
        @unlink($tmp);
        bp_write_failed($dst);
    }
}

// bp_copy_tree copies a file or a directory; links inside a directory are
// left out (they could lead anywhere).
function bp_copy_tree($src, $dst)
{
    if (!is_dir($src)) {
        bp_put_file($dst, $src);
        return 1;
    }
    if (is_link($dst)) {
        // Replaced, never followed: it could lead out of the site.
        @unlink($dst);
    }
    bp_mkdirs($dst);
    $n = 0;
    foreach (scandir($src) as $e) {
        if ($e === '.' || $e === '..') {
            continue;
        }
        if (is_link("$src/$e")) {
            bp_log('skipped the link ' . bp_site_name("$src/$e"));
            continue;
        }
        $n += bp_copy_tree("$src/$e", "$dst/$e");
    }
    return $n;
}

// bp_stage is a fresh directory on the WordPress disk (a rename from it
// into place works; /tmp is another mount), removed at the end.
function bp_stage()
{
    $d = BP_ROOT . '/.bp-stage-' . bin2hex(random_bytes(6));
    if (!@mkdir($d, 0700)) {
        bp_write_failed($d, 'create');
    }
    $GLOBALS['bp']['cleanup'][] = $d;
    return $d;
}

// bp_merge moves a tree into place: what is new is renamed in, files
// replace files, directories merge. A link in the way is replaced, never
// followed.
function bp_merge($src, $dst)
{
    if (is_link($dst) || (file_exists($dst) && (!is_dir($dst) || !is_dir($src)))) {
        if (is_dir($dst) && !is_link($dst)) {
            bp_rmtree($dst);
        } else {
            @unlink($dst);
        }
    }
    if (!file_exists($dst)) {
        if (!@rename($src, $dst)) {
            bp_write_failed($dst, 'move into');
        }
        return;
    }
    foreach (scandir($src) as $e) {
        if ($e !== '.' && $e !== '..') {
            bp_merge("$src/$e", "$dst/$e");
        }
    }
}

// bp_replace puts $src at $dst, moving an older $dst aside first and
// dropping it once the new one is in.
function bp_replace($src, $dst)
{
    $old = null;
    if (file_exists($dst) || is_link($dst)) {
        $old = dirname($dst) . '/.bp-old-' . bin2hex(random_bytes(6));
        if (!@rename($dst, $old)) {
            bp_write_failed($dst, 'replace');
        }
        $GLOBALS['bp']['cleanup'][] = $old;
    }
    if (!@rename($src, $dst)) {
        if ($old) {
            @rename($old, $dst);
        }
        bp_write_failed($dst, 'move into');
    }
    if ($old) {
        bp_rmtree($old);
    }
}

// bp_touch_tree stamps unpacked files with the current time: ZIP entries
// carry their own times, and opcache would take a replaced file for the
// one it cached.
function bp_touch_tree($dir)
{
    $now = time();
    if (!is_dir($dir)) {
        @touch($dir, $now);
        return;
    }
    $it = new RecursiveIteratorIterator(new RecursiveDirectoryIterator($dir, FilesystemIterator::SKIP_DOTS),
        RecursiveIteratorIterator::SELF_FIRST);
    foreach ($it as $f) {
        if (!$f->isLink()) {
            @touch($f->getPathname(), $now);
        }
    }
}

// bp_zip_open opens a ZIP and checks every entry before anything is
// unpacked. $keep, when given, selects entries by name (true keeps).
// Answers the archive and the names to extract.
function bp_zip_open($path, $what, $keep = null)
{
    if (!class_exists('ZipArchive')) {
        bp_fail('unsupported', 'PHP has no zip extension here');
    }
    $zip = new ZipArchive();
    $r = $zip->open($path);
    if ($r !== true) {
        bp_fail('invalid', "$what is not a valid ZIP file (libzip error $r)");
    }
    if ($zip->numFiles > BP_MAX_ZIP_ENTRIES) {
        bp_fail('invalid', "$what has {$zip->numFiles} entries; at most " . BP_MAX_ZIP_ENTRIES . ' are allowed');
    }
    $total = 0;
    $names = array();
    for ($i = 0; $i < $zip->numFiles; $i++) {
        $st = $zip->statIndex($i);
        if ($st === false) {
            bp_fail('invalid', "$what: cannot read entry $i");
        }
        $n = $st['name'];
        if (!bp_safe_entry($n)) {
            bp_fail('invalid', "$what has an unsafe entry: " . bp_excerpt(str_replace("\0", '\0', $n), 200, false) . ' (absolute, or with a .. segment)');
        }
        $os = 0;
        $attr = 0;
        if ($zip->getExternalAttributesIndex($i, $os, $attr) && $os === ZipArchive::OPSYS_UNIX && (($attr >> 16) & 0170000) === 0120000) {
            bp_fail('invalid', "$what has a symbolic link: $n");
        }
        $total += $st['size'];
        if ($total > BP_MAX_ZIP_BYTES) {
            bp_fail('invalid', "$what unpacks to more than 1 GiB");
        }
        // macOS resource forks: WordPress skips them when it unzips.
        if ($n === '__MACOSX/' || strpos($n, '__MACOSX/') === 0) {
            continue;
        }
        if ($keep !== null && !$keep($n)) {
            continue;
        }
        $names[] = $n;
    }
    return array($zip, $names);
}

// bp_unzip_to unpacks a checked ZIP into an empty directory.
function bp_unzip_to($path, $dir, $what, $keep = null)
{
    list($zip, $names) = bp_zip_open($path, $what, $keep);
    if ($names && !$zip->extractTo($dir, $names)) {
        $zip->close();
        if (bp_disk_full($dir)) {
            bp_fail('disk_full', "the site's disk is full: cannot unpack $what");
        }
        bp_fail('invalid', "cannot unpack $what: " . $zip->getStatusString());
    }
    $zip->close();
    bp_touch_tree($dir);
    return count($names);
}

// ---- File steps -----------------------------------------------------------

function bp_step_write_file()
{
    $dst = bp_site_path(bp_arg('path'), 'writeFile path');
    $data = bp_arg('data');
    if (bp_is_file_ref($data)) {
        list($src) = bp_file_ref($data, 'writeFile data');
        bp_put_file($dst, $src);
    } elseif (is_string($data)) {
        bp_put_file($dst, null, $data);
    } elseif ($data === null) {
        bp_fail('invalid', 'writeFile needs data');
    } else {
        bp_fail('invalid', 'writeFile data must be text or a file');
    }
    bp_log('wrote ' . bp_site_name($dst) . ' (' . filesize($dst) . ' bytes)');
}

// bp_write_tree writes a $dir resource's files under $base.
function bp_write_tree($dirRef, $base, $what)
{
    $files = isset($dirRef['files']) && is_array($dirRef['files']) ? $dirRef['files'] : array();
    $n = 0;
    foreach ($files as $rel => $blob) {
        $clean = bp_clean_rel((string) $rel);
        if ($clean === false) {
            bp_fail('path_outside_site', "$what has an unsafe path: " . bp_excerpt(str_replace("\0", '\0', (string) $rel), 200, false));
        }
        $src = bp_blob($blob, "$what/$clean");
        $dst = bp_confine($base . '/' . $clean, BP_ROOT, "$what/$clean", 'the file', false);
        bp_put_file($dst, $src);
        $n++;
    }
    return $n;
}

function bp_step_write_files()
{
    $base = bp_site_path(bp_arg('writeToPath'), 'writeFiles writeToPath');
    $tree = bp_arg('filesTree');
    if (!bp_is_dir_ref($tree)) {
        bp_fail('invalid', 'writeFiles filesTree must be a directory');
    }
    bp_mkdirs($base);
    $n = bp_write_tree($tree['$dir'], $base, 'filesTree');
    bp_log("wrote $n files under " . bp_site_name($base));
}

function bp_step_mkdir()
{
    $dir = bp_site_path(bp_arg('path'), 'mkdir path');
    $existed = is_dir($dir);
    bp_mkdirs($dir);
    bp_log(($existed ? 'directory already there: ' : 'created ') . bp_site_name($dir));
}

function bp_step_rm()
{
    $p = bp_site_path(bp_arg('path'), 'rm path', true);
    if (!file_exists($p) && !is_link($p)) {
        bp_fail('not_found', 'rm: ' . bp_arg('path') . ' does not exist');
    }
    if (is_dir($p) && !is_link($p)) {
        bp_fail('invalid', 'rm: ' . bp_arg('path') . ' is a directory (use rmdir)');
    }
    if (!@unlink($p)) {
        bp_write_failed($p, 'remove');
    }
    bp_log('removed ' . bp_site_name($p));
}

function bp_step_rmdir()
{
    $p = bp_site_path(bp_arg('path'), 'rmdir path', true);
    if ($p === BP_ROOT) {
        bp_fail('invalid', 'rmdir: the WordPress directory itself cannot be removed');
    }
    if (!file_exists($p) && !is_link($p)) {
        bp_fail('not_found', 'rmdir: ' . bp_arg('path') . ' does not exist');
    }
    if (!is_dir($p) || is_link($p)) {
        bp_fail('invalid', 'rmdir: ' . bp_arg('path') . ' is not a directory (use rm)');
    }
    if (!bp_rmtree($p)) {
        bp_write_failed($p, 'remove');
    }
    bp_log('removed the directory ' . bp_site_name($p));
}

function bp_step_mv()
{
    $from = bp_site_path(bp_arg('fromPath'), 'mv fromPath', true);
    $to = bp_site_path(bp_arg('toPath'), 'mv toPath', true);
    if (!file_exists($from) && !is_link($from)) {
        bp_fail('not_found', 'mv: ' . bp_arg('fromPath') . ' does not exist');
    }
    if ($from === BP_ROOT || $to === BP_ROOT) {
        bp_fail('invalid', 'mv: the WordPress directory itself cannot be moved');
    }
    if (bp_inside($to, $from)) {
        bp_fail('invalid', 'mv: cannot move ' . bp_arg('fromPath') . ' into itself');
    }
    bp_mkdirs(dirname($to));
    if (!@rename($from, $to)) {
        $e = error_get_last();
        bp_fail('invalid', 'mv: cannot move ' . bp_site_name($from) . ' to ' . bp_site_name($to) . ($e ? ': ' . $e['message'] : ''));
    }
    bp_log('moved ' . bp_site_name($from) . ' to ' . bp_site_name($to));
}

function bp_step_cp()
{
    $from = bp_site_path(bp_arg('fromPath'), 'cp fromPath');
    $to = bp_site_path(bp_arg('toPath'), 'cp toPath');
    if (!file_exists($from)) {
        bp_fail('not_found', 'cp: ' . bp_arg('fromPath') . ' does not exist');
    }
    if (bp_inside($to, $from) && is_dir($from)) {
        bp_fail('invalid', 'cp: cannot copy ' . bp_arg('fromPath') . ' into itself');
    }
    $n = bp_copy_tree($from, $to);
    bp_log('copied ' . bp_site_name($from) . ' to ' . bp_site_name($to) . ($n > 1 ? " ($n files)" : ''));
}

function bp_step_unzip()
{
    $zipFile = bp_arg('zipFile');
    $zipPath = bp_arg('zipPath');
    if ($zipFile !== null) {
        list($src, $name) = bp_file_ref($zipFile, 'unzip zipFile');
    } elseif (is_string($zipPath)) {
        $src = bp_read_path($zipPath, 'unzip zipPath');
        $name = basename($src);
        if (!is_file($src)) {
            bp_fail('not_found', "unzip: $zipPath does not exist");
        }
        bp_log('note: zipPath is deprecated; use zipFile');
    } else {
        bp_fail('invalid', 'unzip needs zipFile (or the deprecated zipPath)');
    }
    $dst = bp_site_path(bp_arg('extractToPath'), 'unzip extractToPath');
    $stage = bp_stage();
    $n = bp_unzip_to($src, $stage, $name);
    bp_mkdirs($dst);
    foreach (scandir($stage) as $e) {
        if ($e !== '.' && $e !== '..') {
            bp_merge("$stage/$e", "$dst/$e");
        }
    }
    bp_log("unpacked $name ($n entries) into " . bp_site_name($dst));
}
