<?php
// Lists and installs plugins and themes of this sandbox. The agent runs it
// with `php -r` as www-data inside the site's container, with one JSON
// request on stdin: {op: list}, {op: install, zip (path of a checked ZIP
// under /srv/site/tmp), kind, dir, activate, url} or {op: activate, kind,
// dir}. It answers one JSON
// object on stdout: the result, or {"error": {"code", "message"}}.

function pl_out($v) { fwrite(STDOUT, json_encode($v, JSON_UNESCAPED_SLASHES)); exit(0); }
function pl_fail($msg, $code = 'invalid') { pl_out(['error' => ['code' => $code, 'message' => $msg]]); }

function pl_rmtree($p) {
    if (is_dir($p) && !is_link($p)) {
        foreach (scandir($p) as $e) {
            if ($e !== '.' && $e !== '..') pl_rmtree($p . '/' . $e);
        }
        return @rmdir($p);
    }
    return @unlink($p);
}

$req = json_decode(stream_get_contents(STDIN), true);
if (!is_array($req)) pl_fail('bad request');
$_SERVER['HTTP_HOST'] = parse_url((string)($req['url'] ?? 'http://localhost'), PHP_URL_HOST);
define('WP_ADMIN', true);
require '/srv/site/wordpress/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/plugin.php';
require_once ABSPATH . 'wp-admin/includes/theme.php';

function pl_list() {
    $out = [];
    foreach (get_plugins() as $file => $p) {
        $out[] = ['slug' => dirname($file) === '.' ? basename($file, '.php') : dirname($file), 'file' => $file,
            'name' => $p['Name'], 'version' => $p['Version'], 'active' => is_plugin_active($file), 'kind' => 'plugin'];
    }
    $current = get_stylesheet();
    foreach (wp_get_themes() as $slug => $t) {
        $out[] = ['slug' => $slug, 'name' => $t->get('Name'), 'version' => $t->get('Version'),
            'active' => $slug === $current, 'kind' => 'theme'];
    }
    return $out;
}

switch ($req['op'] ?? '') {
case 'list':
    pl_out(['plugins' => pl_list()]);
case 'install':
    $kind = $req['kind'] === 'theme' ? 'theme' : 'plugin';
    $dir = (string)$req['dir'];
    if (!preg_match('/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/', $dir)) pl_fail('bad directory name');
    $zipPath = (string)$req['zip'];
    if (strpos($zipPath, '/srv/site/tmp/') !== 0 || strpos($zipPath, '..') !== false) pl_fail('bad zip path');
    $base = $kind === 'theme' ? get_theme_root() : WP_PLUGIN_DIR;
    if (!is_dir($base) && !@mkdir($base, 0755, true)) pl_fail("cannot create $base");
    // Staged beside its destination: tmp/ is another mount, and a rename
    // across mounts fails even on the same disk.
    $stage = $base . '/.sandbox-stage-' . bin2hex(random_bytes(6));
    $zip = new ZipArchive();
    if ($zip->open($zipPath) !== true) pl_fail('cannot open the ZIP');
    // The ZIP was checked by the agent; check again what is unpacked here.
    for ($i = 0; $i < $zip->numFiles; $i++) {
        $n = $zip->getNameIndex($i);
        if ($n === false || $n[0] === '/' || strpos($n, "\0") !== false || preg_match('#(^|/)\.\.(/|$)#', $n)) pl_fail('unsafe entry in the ZIP');
        if ($zip->getExternalAttributesIndex($i, $os, $attr) && $os === ZipArchive::OPSYS_UNIX && (($attr >> 16) & 0170000) === 0120000) pl_fail('symlink in the ZIP');
    }
    if (!@mkdir($stage, 0755) || !$zip->extractTo($stage)) {
        $free = @disk_free_space($base); // before the partial copy goes
        pl_rmtree($stage);
        if ($free !== false && $free < 262144) pl_fail("the site's disk is full", 'disk_full');
        pl_fail('cannot unpack the ZIP');
    }
    $zip->close();
    // ZIP entries carry their own (often identical) times; opcache would
    // take a replaced file for the cached one. Stamp everything now.
    $now = time();
    $it = new RecursiveIteratorIterator(new RecursiveDirectoryIterator($stage, FilesystemIterator::SKIP_DOTS),
        RecursiveIteratorIterator::SELF_FIRST);
    foreach ($it as $f) { if (!$f->isLink()) @touch($f->getPathname(), $now); }
    $src = is_dir("$stage/$dir") ? "$stage/$dir" : "$stage/$dir.php";
    $dst = is_dir("$stage/$dir") ? "$base/$dir" : "$base/$dir.php";
    if (!file_exists($src)) { pl_rmtree($stage); pl_fail("the ZIP has no $dir"); }
    // Replace an older copy: move it aside, move the new one in, drop the old.
    $old = null;
    if (file_exists($dst) || is_link($dst)) {
        $old = "$stage.old";
        if (!@rename($dst, $old)) { pl_rmtree($stage); pl_fail("cannot replace $dir"); }
    }
    if (!@rename($src, $dst)) {
        if ($old) @rename($old, $dst);
        pl_rmtree($stage);
        pl_fail("cannot install $dir");
    }
    pl_rmtree($stage);
    if ($old) pl_rmtree($old);
    wp_clean_plugins_cache();
    $activated = false;
    if (!empty($req['activate'])) {
        if ($kind === 'theme') {
            switch_theme($dir);
            $activated = get_stylesheet() === $dir;
        } else {
            $file = null;
            foreach (get_plugins() as $f => $p) {
                if ($f === "$dir.php" || strpos($f, "$dir/") === 0) { $file = $f; break; }
            }
            if ($file === null) pl_fail("$dir was unpacked but WordPress does not see a plugin in it");
            $r = activate_plugin($file);
            if (is_wp_error($r)) pl_fail("installed, but activation failed: " . $r->get_error_message());
            $activated = true;
        }
    }
    foreach (pl_list() as $p) {
        if ($p['kind'] === $kind && $p['slug'] === $dir) pl_out(['plugin' => $p]);
    }
    pl_out(['plugin' => ['slug' => $dir, 'name' => $dir, 'version' => '', 'active' => $activated, 'kind' => $kind]]);
case 'activate':
    // A plugin or theme placed by a Git deploy, activated once.
    $kind = $req['kind'] === 'theme' ? 'theme' : 'plugin';
    $dir = (string)$req['dir'];
    if (!preg_match('/^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$/', $dir)) pl_fail('bad directory name');
    wp_clean_plugins_cache();
    if ($kind === 'theme') {
        $theme = wp_get_theme($dir);
        if (!$theme->exists()) pl_fail("$dir is not a theme WordPress can use: " . ($theme->errors() ? $theme->errors()->get_error_message() : 'no style.css'));
        switch_theme($dir);
        pl_out(['plugin' => ['slug' => $dir, 'name' => $theme->get('Name'), 'version' => $theme->get('Version'), 'active' => get_stylesheet() === $dir, 'kind' => 'theme']]);
    }
    $file = null;
    foreach (get_plugins() as $f => $p) {
        if (strpos($f, "$dir/") === 0) { $file = $f; break; }
    }
    if ($file === null) pl_fail("$dir holds no plugin WordPress sees (a PHP file with a Plugin Name header)");
    if (!is_plugin_active($file)) {
        $r = activate_plugin($file);
        if (is_wp_error($r)) pl_fail("activation failed: " . $r->get_error_message());
    }
    foreach (pl_list() as $p) {
        if ($p['kind'] === 'plugin' && $p['slug'] === $dir) pl_out(['plugin' => $p]);
    }
    pl_fail("$dir was activated but is not listed");
default:
    pl_fail('unknown operation');
}
