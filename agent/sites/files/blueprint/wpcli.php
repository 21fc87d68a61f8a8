<?php
// wp-cli: no WP-CLI build reaches the sandboxes, so the runner does the
// commands Blueprints use itself, with WordPress's own functions, as
// WP-CLI does them (same options, same messages in the log). args.argv is
// the command already split, without the leading "wp"; plugins, themes
// and media named by URL or slug were fetched beforehand (fetched). An
// unknown command, subcommand or flag fails the step (unsupported).

// Global WP-CLI flags that change nothing here.
const BP_CLI_IGNORED = array('path', 'url', 'skip-plugins', 'skip-themes', 'skip-packages', 'debug', 'quiet', 'color',
    'allow-root', 'context');

function bp_wpcli_run()
{
    require_once ABSPATH . 'wp-admin/includes/admin.php';
    $argv = bp_arg('argv');
    if (!is_array($argv)) {
        bp_fail('invalid', 'wp-cli needs the command split into argv');
    }
    $argv = array_values(array_map('strval', $argv));
    if ($argv && $argv[0] === 'wp') {
        array_shift($argv);
    }
    $pos = array();
    $assoc = array();
    $rest = false;
    foreach ($argv as $a) {
        if ($rest || $a === '' || strpos($a, '--') !== 0 || $a === '--') {
            if ($a === '--' && !$rest) {
                $rest = true;
                continue;
            }
            $pos[] = $a;
            continue;
        }
        $kv = substr($a, 2);
        $eq = strpos($kv, '=');
        if ($eq !== false) {
            $assoc[substr($kv, 0, $eq)] = substr($kv, $eq + 1);
        } elseif (strpos($kv, 'no-') === 0) {
            $assoc[substr($kv, 3)] = false;
        } else {
            $assoc[$kv] = true;
        }
    }
    foreach (BP_CLI_IGNORED as $k) {
        unset($assoc[$k]);
    }
    if (isset($assoc['user'])) {
        $u = bp_cli_user($assoc['user']);
        wp_set_current_user($u->ID);
        unset($assoc['user']);
    }
    foreach (array('require', 'exec', 'ssh', 'http', 'prompt') as $k) {
        if (isset($assoc[$k])) {
            bp_fail('unsupported', "wp-cli: the global flag --$k is not supported here");
        }
    }
    if (!$pos) {
        bp_fail('invalid', 'wp-cli: no command given');
    }
    $cmd = array_shift($pos);
    $subs = array(
        'post' => array('create', 'generate'),
        'media' => array('import'),
        'site' => array('empty'),
        'option' => array('get', 'update', 'add', 'delete'),
        'user' => array('create', 'update', 'meta'),
        'plugin' => array('install', 'activate', 'deactivate'),
        'theme' => array('install', 'activate'),
        'rewrite' => array('structure', 'flush'),
    );
    if ($cmd === 'search-replace') {
        bp_cli_search_replace($pos, $assoc);
        return;
    }
    if (!isset($subs[$cmd])) {
        bp_fail('unsupported', "wp-cli: 'wp $cmd' is not supported here (supported: " . implode(', ', array_keys($subs)) . ', search-replace)');
    }
    $sub = array_shift($pos);
    if ($sub === null || !in_array($sub, $subs[$cmd], true)) {
        bp_fail('unsupported', "wp-cli: 'wp $cmd " . (string) $sub . "' is not supported here (supported: " . implode(', ', $subs[$cmd]) . ')');
    }
    $fn = 'bp_cli_' . $cmd . '_' . $sub;
    $fn($pos, $assoc);
}

// bp_cli_flags refuses any flag a command does not take.
function bp_cli_flags($assoc, $allowed, $what)
{
    foreach ($assoc as $k => $v) {
        if (!in_array($k, $allowed, true)) {
            bp_fail('unsupported', "wp-cli: 'wp $what' has no --$k flag here");
        }
    }
}

function bp_cli_args($pos, $min, $max, $usage)
{
    if (count($pos) < $min || ($max >= 0 && count($pos) > $max)) {
        bp_fail('invalid', "wp-cli: usage: wp $usage");
    }
}

function bp_cli_flag($assoc, $k, $default = false)
{
    return array_key_exists($k, $assoc) ? $assoc[$k] : $default;
}

function bp_cli_user($spec)
{
    $spec = (string) $spec;
    if (ctype_digit($spec)) {
        $u = get_userdata((int) $spec);
    } elseif (strpos($spec, '@') !== false) {
        $u = get_user_by('email', $spec);
    } else {
        $u = get_user_by('login', $spec);
    }
    if (!$u) {
        bp_fail('not_found', "wp-cli: Invalid user ID, email or login: '$spec'");
    }
    return $u;
}

// bp_cli_file resolves a file argument: relative to WP-CLI's working
// directory here (/), so wordpress/wp-content/x.md is /wordpress/...
function bp_cli_file($arg)
{
    if ($arg === '-') {
        bp_fail('unsupported', 'wp-cli: reading from STDIN is not supported here');
    }
    $p = $arg !== '' && $arg[0] === '/' ? $arg : '/' . $arg;
    return bp_read_path($p, "the file $arg");
}

// bp_cli_json reads a --format=json value or a JSON-looking array argument.
function bp_cli_json($v, $what)
{
    $d = json_decode((string) $v, true);
    if ($d === null && trim((string) $v) !== 'null') {
        bp_fail('invalid', "wp-cli: $what is not valid JSON");
    }
    return $d;
}

function bp_cli_print($v, $format)
{
    if ($format === 'json') {
        bp_log(json_encode($v, JSON_UNESCAPED_SLASHES));
    } elseif (is_array($v) || is_object($v)) {
        bp_log(var_export($v, true));
    } else {
        bp_log((string) $v);
    }
}

// ---- post ---------------------------------------------------------------------

const BP_CLI_POST_FIELDS = array('post_author', 'post_date', 'post_date_gmt', 'post_content', 'post_content_filtered', 'post_title',
    'post_excerpt', 'post_status', 'post_type', 'comment_status', 'ping_status', 'post_password', 'post_name', 'to_ping', 'pinged',
    'post_modified', 'post_modified_gmt', 'post_parent', 'menu_order', 'post_mime_type', 'guid', 'post_category', 'tags_input',
    'tax_input', 'meta_input', 'page_template', 'import_id');

function bp_cli_post_create($pos, $assoc)
{
    bp_cli_flags($assoc, array_merge(BP_CLI_POST_FIELDS, array('porcelain')), 'post create');
    bp_cli_args($pos, 0, 1, 'post create [--<field>=<value>] [--porcelain] [<file>]');
    $porcelain = bp_cli_flag($assoc, 'porcelain');
    unset($assoc['porcelain']);
    if ($pos) {
        $file = bp_cli_file($pos[0]);
        if (!is_file($file)) {
            bp_fail('not_found', "wp-cli: Unable to read content from '{$pos[0]}'.");
        }
        $assoc['post_content'] = (string) file_get_contents($file);
    }
    if (isset($assoc['post_category'])) {
        $ids = array();
        foreach (explode(',', (string) $assoc['post_category']) as $c) {
            if (trim($c) === '') {
                continue;
            }
            $id = category_exists(is_numeric($c) ? (int) $c : $c);
            if (!$id) {
                bp_fail('not_found', "wp-cli: No such post category '$c'.");
            }
            $ids[] = (int) $id;
        }
        $assoc['post_category'] = $ids;
    }
    foreach (array('meta_input', 'tax_input') as $k) {
        if (isset($assoc[$k]) && is_string($assoc[$k])) {
            $assoc[$k] = bp_cli_json($assoc[$k], "--$k");
        }
    }
    $id = wp_insert_post(wp_slash($assoc), true);
    if (is_wp_error($id)) {
        bp_fail('invalid', 'wp-cli: ' . $id->get_error_message());
    }
    $status = get_post_status($id);
    if ($status && !get_post_status_object($status)) {
        bp_log("note: '$status' is not a registered post status (WordPress stores it as given)");
    }
    bp_log($porcelain ? (string) $id : "Success: Created post $id.");
}

function bp_cli_date_arg($d)
{
    // WP-CLI also takes yyyy-mm-dd-hh-ii-ss.
    if (preg_match('/^(\d{4}-\d{2}-\d{2})-(\d{2})-(\d{2})-(\d{2})$/', $d, $m)) {
        return "{$m[1]} {$m[2]}:{$m[3]}:{$m[4]}";
    }
    $dt = DateTime::createFromFormat('Y-m-d', $d);
    if ($dt && $dt->format('Y-m-d') === $d) {
        return $d . ' 00:00:00';
    }
    return $d;
}

function bp_cli_post_generate($pos, $assoc)
{
    global $wpdb;
    bp_cli_flags($assoc, array('count', 'post_type', 'post_status', 'post_title', 'post_author', 'post_date', 'post_date_gmt',
        'post_content', 'max_depth', 'format'), 'post generate');
    bp_cli_args($pos, 0, 0, 'post generate [--count=<number>] [--post_type=<type>] ...');
    if (bp_cli_flag($assoc, 'post_content')) {
        bp_fail('unsupported', 'wp-cli: The parameter `post_content` reads from STDIN, which a Blueprint step does not have.');
    }
    $count = (int) bp_cli_flag($assoc, 'count', 100);
    if ($count < 0 || $count > 10000) {
        bp_fail('invalid', 'wp-cli: --count must be between 0 and 10000 here');
    }
    $type = (string) bp_cli_flag($assoc, 'post_type', 'post');
    $status = (string) bp_cli_flag($assoc, 'post_status', 'publish');
    $title = (string) bp_cli_flag($assoc, 'post_title', '');
    $date = bp_cli_date_arg((string) bp_cli_flag($assoc, 'post_date', ''));
    $dateGmt = bp_cli_date_arg((string) bp_cli_flag($assoc, 'post_date_gmt', ''));
    if ($date !== '' && $dateGmt === '') {
        $dateGmt = get_gmt_from_date($date);
    }
    if ($dateGmt !== '' && $date === '') {
        $date = get_date_from_gmt($dateGmt);
    }
    if (!post_type_exists($type)) {
        bp_fail('invalid', "wp-cli: '$type' is not a registered post type.");
    }
    $author = 0;
    if (bp_cli_flag($assoc, 'post_author', '') !== '') {
        $author = bp_cli_user($assoc['post_author'])->ID;
    }
    $maxDepth = (int) bp_cli_flag($assoc, 'max_depth', 1);
    $format = (string) bp_cli_flag($assoc, 'format', 'progress');
    $total = (int) $wpdb->get_var($wpdb->prepare("SELECT COUNT(*) FROM $wpdb->posts WHERE post_type = %s", $type));
    $pto = get_post_type_object($type);
    $label = $title !== '' ? $title : $pto->labels->singular_name;
    $prev = 0;
    $depth = 1;
    $parent = 0;
    $ids = array();
    for ($i = $total; $i < $total + $count; $i++) {
        if ($pto->hierarchical) {
            if (wp_rand(1, 2) === 1 && $depth < $maxDepth) {
                $parent = $prev;
                $depth++;
            } elseif (wp_rand(1, 10) === 7) {
                $depth = 1;
                $parent = 0;
            }
        }
        $id = wp_insert_post(array(
            'post_type' => $type,
            'post_title' => $title !== '' && $i === $total ? $label : "$label $i",
            'post_status' => $status,
            'post_author' => $author,
            'post_parent' => $parent,
            'post_name' => $title !== '' ? sanitize_title($title . ($i === $total ? '' : "-$i")) : "post-$i",
            'post_date' => $date,
            'post_date_gmt' => $dateGmt,
            'post_content' => '',
        ), true);
        if (is_wp_error($id)) {
            bp_log('Warning: ' . $id->get_error_message());
            continue;
        }
        $prev = $id;
        $ids[] = $id;
    }
    if ($format === 'ids') {
        bp_log(implode(' ', $ids));
    } else {
        bp_log('Generated ' . count($ids) . " $type" . (count($ids) === 1 ? '' : 's') . ($ids ? ' (IDs ' . $ids[0] . '–' . end($ids) . ')' : '') . '.');
    }
}

// ---- media ----------------------------------------------------------------------

function bp_cli_media_import($pos, $assoc)
{
    bp_cli_flags($assoc, array('post_id', 'title', 'caption', 'alt', 'desc', 'featured_image', 'porcelain', 'file_name', 'post_name'), 'media import');
    bp_cli_args($pos, 1, -1, 'media import <file>... [--post_id=<id>] [--title=] [--caption=] [--alt=] [--desc=] [--featured_image] [--porcelain]');
    require_once ABSPATH . 'wp-admin/includes/media.php';
    require_once ABSPATH . 'wp-admin/includes/file.php';
    require_once ABSPATH . 'wp-admin/includes/image.php';
    $up = wp_upload_dir();
    if (!empty($up['error'])) {
        bp_fail('write_failed', 'wp-cli: the uploads directory cannot be used: ' . $up['error']);
    }
    bp_site_path($up['basedir'], 'the uploads directory');
    $postId = false;
    if (isset($assoc['post_id'])) {
        if (get_post((int) $assoc['post_id'])) {
            $postId = (int) $assoc['post_id'];
        } else {
            bp_log('Warning: Invalid --post_id');
        }
    }
    $porcelain = bp_cli_flag($assoc, 'porcelain');
    $fetched = bp_req('fetched', array());
    $ok = 0;
    $errors = 0;
    foreach ($pos as $arg) {
        $remote = parse_url($arg, PHP_URL_HOST);
        if ($remote) {
            if (!isset($fetched[$arg])) {
                bp_log("Warning: Unable to import file '$arg'. Reason: it was not fetched.");
                $errors++;
                continue;
            }
            list($src) = bp_file_ref($fetched[$arg], "the file $arg");
            $name = (string) explode('?', basename((string) parse_url($arg, PHP_URL_PATH)), 2)[0];
        } else {
            $src = bp_cli_file($arg);
            if (!is_file($src)) {
                bp_log("Warning: Unable to import file '$arg'. Reason: File doesn't exist.");
                $errors++;
                continue;
            }
            $name = basename($src);
        }
        if (!empty($assoc['file_name'])) {
            $name = sanitize_file_name((string) $assoc['file_name']) . (pathinfo($assoc['file_name'], PATHINFO_EXTENSION) ? '' : '.' . pathinfo($name, PATHINFO_EXTENSION));
        }
        // WordPress moves the file it sideloads: it gets a copy.
        $tmp = BP_TMP . '/bp-media-' . bin2hex(random_bytes(6));
        if (!@copy($src, $tmp)) {
            bp_write_failed($tmp);
        }
        $GLOBALS['bp']['cleanup'][] = $tmp;
        $post = array(
            'post_title' => (string) bp_cli_flag($assoc, 'title', ''),
            'post_excerpt' => (string) bp_cli_flag($assoc, 'caption', ''),
            'post_content' => (string) bp_cli_flag($assoc, 'desc', ''),
            'post_name' => (string) bp_cli_flag($assoc, 'post_name', ''),
        );
        if ($post['post_title'] === '' || $post['post_excerpt'] === '') {
            $meta = @wp_read_image_metadata($tmp);
            if ($meta) {
                if ($post['post_title'] === '' && trim($meta['title']) && !is_numeric(sanitize_title($meta['title']))) {
                    $post['post_title'] = $meta['title'];
                }
                if ($post['post_excerpt'] === '' && trim($meta['caption'])) {
                    $post['post_excerpt'] = $meta['caption'];
                }
            }
        }
        if ($post['post_title'] === '') {
            $post['post_title'] = preg_replace('/\.[^.]+$/', '', basename($arg));
        }
        $id = media_handle_sideload(array('name' => $name, 'tmp_name' => $tmp), (int) $postId, $post['post_title'], wp_slash($post));
        if (is_wp_error($id)) {
            @unlink($tmp);
            bp_log("Warning: Unable to import file '$arg'. Reason: " . implode(', ', $id->get_error_messages()));
            $errors++;
            continue;
        }
        if (!empty($assoc['alt'])) {
            update_post_meta($id, '_wp_attachment_image_alt', wp_slash((string) $assoc['alt']));
        }
        if ($postId && bp_cli_flag($assoc, 'featured_image')) {
            update_post_meta($postId, '_thumbnail_id', $id);
        }
        $ok++;
        if ($porcelain) {
            bp_log((string) $id);
        } else {
            $more = $postId ? " and attached to post $postId" . (bp_cli_flag($assoc, 'featured_image') ? ' as featured image' : '') : '';
            bp_log("Imported file '$arg' as attachment ID $id$more.");
        }
    }
    $noun = count($pos) === 1 ? 'item' : 'items';
    if ($errors) {
        bp_fail('not_found', "wp-cli: Only imported $ok of " . count($pos) . " $noun. See the log for why.");
    }
    if (!$porcelain) {
        bp_log("Success: Imported $ok of " . count($pos) . " $noun.");
    }
}

// ---- site -----------------------------------------------------------------------

function bp_cli_site_empty($pos, $assoc)
{
    global $wpdb;
    bp_cli_flags($assoc, array('uploads', 'yes'), 'site empty');
    bp_cli_args($pos, 0, 0, 'site empty [--uploads] [--yes]');
    if (!bp_cli_flag($assoc, 'yes')) {
        bp_fail('invalid', 'wp-cli: wp site empty asks for confirmation, which a Blueprint step cannot give: add --yes');
    }
    $q = function ($sql) use ($wpdb) {
        $wpdb->last_error = '';
        if ($wpdb->query($sql) === false || $wpdb->last_error !== '') {
            bp_fail('sql_error', 'wp-cli: site empty: ' . $wpdb->last_error);
        }
    };
    foreach (array($wpdb->posts, $wpdb->postmeta, $wpdb->links, $wpdb->comments, $wpdb->commentmeta) as $t) {
        $q("TRUNCATE TABLE `$t`");
    }
    $taxes = $wpdb->get_col("SELECT DISTINCT taxonomy FROM $wpdb->term_taxonomy");
    foreach ($taxes as $tax) {
        delete_option($tax . '_children');
    }
    foreach (array($wpdb->terms, $wpdb->term_taxonomy, $wpdb->term_relationships, $wpdb->termmeta) as $t) {
        $q("TRUNCATE TABLE `$t`");
    }
    // The default category comes back, as WP-CLI does.
    $wpdb->insert($wpdb->terms, array('term_id' => 1, 'name' => __('Uncategorized'), 'slug' => sanitize_title(_x('Uncategorized', 'Default category slug')), 'term_group' => 0));
    $wpdb->insert($wpdb->term_taxonomy, array('term_id' => 1, 'taxonomy' => 'category', 'description' => '', 'parent' => 0, 'count' => 0));
    update_option('wp_page_for_privacy_policy', 0);
    update_option('sticky_posts', array());
    wp_cache_flush();
    if (bp_cli_flag($assoc, 'uploads')) {
        $up = wp_upload_dir();
        $base = bp_site_path($up['basedir'], 'the uploads directory');
        $n = 0;
        if (is_dir($base)) {
            foreach (scandir($base) as $e) {
                if ($e !== '.' && $e !== '..') {
                    bp_rmtree("$base/$e");
                    $n++;
                }
            }
        }
        bp_log("emptied the uploads directory ($n entries)");
    }
    bp_log("Success: The site at '" . site_url() . "' was emptied.");
}

// ---- option ---------------------------------------------------------------------

function bp_cli_option_value($pos, $assoc)
{
    if (!isset($pos[1])) {
        bp_fail('invalid', 'wp-cli: a value is needed (STDIN is not supported here)');
    }
    $v = $pos[1];
    if (bp_cli_flag($assoc, 'format', 'plaintext') === 'json') {
        $v = bp_cli_json($v, 'the value');
    }
    return $v;
}

function bp_cli_autoload($assoc)
{
    if (!isset($assoc['autoload'])) {
        return null;
    }
    $a = $assoc['autoload'];
    if (!in_array($a, array('yes', 'no', 'on', 'off'), true)) {
        bp_fail('invalid', "wp-cli: --autoload must be yes or no");
    }
    return in_array($a, array('yes', 'on'), true) ? 'yes' : 'no';
}

function bp_cli_option_get($pos, $assoc)
{
    bp_cli_flags($assoc, array('format'), 'option get');
    bp_cli_args($pos, 1, 1, 'option get <key> [--format=<format>]');
    $v = get_option($pos[0]);
    if ($v === false) {
        bp_fail('not_found', "wp-cli: Could not get '{$pos[0]}' option. Does it exist?");
    }
    bp_cli_print($v, (string) bp_cli_flag($assoc, 'format', 'var_export'));
}

function bp_cli_option_update($pos, $assoc)
{
    bp_cli_flags($assoc, array('format', 'autoload'), 'option update');
    bp_cli_args($pos, 2, 2, 'option update <key> <value> [--autoload=<autoload>] [--format=<format>]');
    $key = $pos[0];
    $v = bp_cli_option_value($pos, $assoc);
    $autoload = bp_cli_autoload($assoc);
    if (in_array($key, array('siteurl', 'home', 'category_base', 'tag_base'), true) && is_string($v)) {
        $v = untrailingslashit($v);
    }
    $v = sanitize_option($key, $v);
    $old = sanitize_option($key, get_option($key));
    if ($v === $old && $autoload === null) {
        bp_log("Success: Value passed for '$key' option is unchanged.");
        return;
    }
    if (!update_option($key, $v, $autoload)) {
        if (get_option($key) == $v) {
            bp_log("Success: Value passed for '$key' option is unchanged.");
            return;
        }
        bp_fail('invalid', "wp-cli: Could not update option '$key'.");
    }
    bp_log("Success: Updated '$key' option.");
}

function bp_cli_option_add($pos, $assoc)
{
    bp_cli_flags($assoc, array('format', 'autoload'), 'option add');
    bp_cli_args($pos, 2, 2, 'option add <key> <value> [--autoload=<autoload>] [--format=<format>]');
    $key = $pos[0];
    $v = bp_cli_option_value($pos, $assoc);
    $autoload = bp_cli_autoload($assoc);
    if (!add_option($key, $v, '', $autoload === null ? 'yes' : $autoload)) {
        bp_fail('invalid', "wp-cli: Could not add option '$key'. Does it already exist?");
    }
    bp_log("Success: Added '$key' option.");
}

function bp_cli_option_delete($pos, $assoc)
{
    bp_cli_flags($assoc, array(), 'option delete');
    bp_cli_args($pos, 1, -1, 'option delete <key>...');
    $bad = array();
    foreach ($pos as $key) {
        if (delete_option($key)) {
            bp_log("Success: Deleted '$key' option.");
        } else {
            bp_log("Warning: Could not delete '$key' option. Does it exist?");
            $bad[] = $key;
        }
    }
    if ($bad) {
        bp_fail('not_found', "wp-cli: Could not delete the option(s) " . implode(', ', $bad) . '. Do they exist?');
    }
}

// ---- user -----------------------------------------------------------------------

function bp_cli_user_create($pos, $assoc)
{
    $fields = array('role', 'user_pass', 'user_registered', 'display_name', 'user_nicename', 'user_url', 'nickname', 'first_name',
        'last_name', 'description', 'rich_editing');
    bp_cli_flags($assoc, array_merge($fields, array('porcelain', 'send-email')), 'user create');
    bp_cli_args($pos, 2, 2, 'user create <user-login> <user-email> [--role=<role>] [--user_pass=<password>] ... [--porcelain]');
    list($login, $email) = $pos;
    if (username_exists($login)) {
        bp_fail('invalid', "wp-cli: The '$login' username is already registered.");
    }
    if (!is_email($email)) {
        bp_fail('invalid', "wp-cli: '$email' is an invalid email address.");
    }
    if (email_exists($email)) {
        bp_fail('invalid', "wp-cli: The '$email' email address is already registered.");
    }
    $role = isset($assoc['role']) ? (string) $assoc['role'] : get_option('default_role');
    if ($role !== '' && !get_role($role)) {
        bp_fail('invalid', "wp-cli: Role doesn't exist: $role");
    }
    $data = array('user_login' => $login, 'user_email' => $email, 'role' => $role);
    foreach ($fields as $f) {
        if ($f !== 'role' && isset($assoc[$f])) {
            $data[$f] = (string) $assoc[$f];
        }
    }
    $generated = !isset($data['user_pass']);
    if ($generated) {
        $data['user_pass'] = wp_generate_password(24);
    }
    $id = wp_insert_user($data);
    if (is_wp_error($id)) {
        bp_fail('invalid', 'wp-cli: ' . $id->get_error_message());
    }
    if (bp_cli_flag($assoc, 'send-email')) {
        wp_new_user_notification($id, null, 'both');
    }
    if (bp_cli_flag($assoc, 'porcelain')) {
        bp_log((string) $id);
    } else {
        bp_log("Success: Created user $id.");
        if ($generated) {
            // WP-CLI prints it; sandboxes sign in with one-time links,
            // and the log is no place for a password.
            bp_log('Password: (generated, not shown)');
        }
    }
}

function bp_cli_user_update($pos, $assoc)
{
    $fields = array('user_pass', 'user_nicename', 'user_url', 'user_email', 'display_name', 'nickname', 'first_name', 'last_name',
        'description', 'rich_editing', 'user_registered', 'role', 'admin_color', 'show_admin_bar_front', 'locale',
        'comment_shortcuts', 'syntax_highlighting');
    bp_cli_flags($assoc, array_merge($fields, array('skip-email', 'user_login')), 'user update');
    bp_cli_args($pos, 1, -1, 'user update <user>... [--<field>=<value>]');
    if (isset($assoc['user_login'])) {
        bp_log("Warning: User logins can't be changed.");
        unset($assoc['user_login']);
    }
    if (bp_cli_flag($assoc, 'skip-email')) {
        add_filter('send_email_change_email', '__return_false');
        add_filter('send_password_change_email', '__return_false');
    }
    unset($assoc['skip-email']);
    if (isset($assoc['role']) && !get_role((string) $assoc['role'])) {
        bp_fail('invalid', "wp-cli: Role doesn't exist: {$assoc['role']}");
    }
    foreach ($pos as $spec) {
        $u = bp_cli_user($spec);
        $data = array('ID' => $u->ID);
        foreach ($assoc as $k => $v) {
            $data[$k] = (string) $v;
        }
        $r = wp_update_user($data);
        if (is_wp_error($r)) {
            bp_fail('invalid', 'wp-cli: ' . $r->get_error_message());
        }
        bp_log("Success: Updated user {$u->ID}.");
    }
}

function bp_cli_user_meta($pos, $assoc)
{
    $sub = array_shift($pos);
    $subs = array('add', 'update', 'set', 'delete', 'get');
    if (!in_array($sub, $subs, true)) {
        bp_fail('unsupported', "wp-cli: 'wp user meta " . (string) $sub . "' is not supported here (supported: add, update, delete, get)");
    }
    bp_cli_flags($assoc, $sub === 'delete' ? array('all') : array('format'), "user meta $sub");
    $min = in_array($sub, array('add', 'update', 'set'), true) ? 3 : 2;
    bp_cli_args($pos, $min, $sub === 'get' ? 2 : 3, "user meta $sub <user> <key>" . ($min === 3 ? ' <value>' : ''));
    $u = bp_cli_user($pos[0]);
    $key = $pos[1];
    $v = isset($pos[2]) ? $pos[2] : null;
    if ($v !== null && bp_cli_flag($assoc, 'format', 'plaintext') === 'json') {
        $v = bp_cli_json($v, 'the value');
    }
    switch ($sub) {
        case 'add':
            if (!add_user_meta($u->ID, wp_slash($key), wp_slash($v))) {
                bp_fail('invalid', 'wp-cli: Could not add custom field.');
            }
            bp_log('Success: Added custom field.');
            break;
        case 'update':
        case 'set':
            $old = get_user_meta($u->ID, $key, true);
            if ($old === $v) {
                bp_log("Success: Value passed for custom field '$key' is unchanged.");
                break;
            }
            if (!update_user_meta($u->ID, wp_slash($key), wp_slash($v))) {
                bp_fail('invalid', "wp-cli: Failed to update custom field '$key'.");
            }
            bp_log("Success: Updated custom field '$key'.");
            break;
        case 'delete':
            if (!delete_user_meta($u->ID, wp_slash($key), $v === null ? '' : wp_slash($v))) {
                bp_fail('not_found', 'wp-cli: Failed to delete custom field.');
            }
            bp_log('Success: Deleted custom field.');
            break;
        case 'get':
            if (!metadata_exists('user', $u->ID, $key)) {
                bp_fail('not_found', "wp-cli: user {$u->ID} has no custom field '$key'.");
            }
            bp_cli_print(get_user_meta($u->ID, $key, true), (string) bp_cli_flag($assoc, 'format', 'var_export'));
            break;
    }
}

// ---- plugin and theme ----------------------------------------------------------

// bp_cli_fetched is the file an install argument was fetched into, or a
// ZIP in the site.
function bp_cli_fetched($arg, $kind)
{
    $fetched = bp_req('fetched', array());
    if (isset($fetched[$arg]) && bp_is_file_ref($fetched[$arg])) {
        return $fetched[$arg];
    }
    if (preg_match('/\.zip$/i', $arg) && !parse_url($arg, PHP_URL_HOST)) {
        $p = bp_cli_file($arg);
        if (is_file($p)) {
            return array('$vfs' => $p);
        }
    }
    bp_fail('not_found', "wp-cli: the $kind $arg was not fetched (a slug, a URL or a ZIP in the site is needed)");
}

function bp_cli_install($kind, $pos, $assoc)
{
    bp_cli_flags($assoc, array('activate', 'force', 'version', 'insecure', 'ignore-requirements'), "$kind install");
    bp_cli_args($pos, 1, -1, "$kind install <$kind|zip|url>... [--activate] [--force]");
    $n = 0;
    foreach ($pos as $arg) {
        $ref = bp_cli_fetched($arg, $kind);
        list($folder, $dst, $skipped) = bp_install_asset($kind, $ref, null, bp_cli_flag($assoc, 'force') ? 'overwrite' : 'skip');
        if ($skipped) {
            bp_log("Warning: $folder: " . ucfirst($kind) . ' already installed.');
        } else {
            bp_log(ucfirst($kind) . ' installed successfully.');
        }
        $n++;
        if (bp_cli_flag($assoc, 'activate')) {
            if ($kind === 'plugin') {
                $file = bp_cli_plugin_file($folder);
                if ($file !== null && is_plugin_active($file)) {
                    bp_log("Warning: Plugin '$folder' is already active.");
                } else {
                    $file = bp_activate_plugin($dst, $folder);
                    bp_log("Plugin '" . bp_cli_plugin_slug($file) . "' activated.");
                }
            } else {
                bp_activate_theme($folder);
                bp_log("Success: Switched to '" . wp_get_theme($folder)->get('Name') . "' theme.");
            }
        }
    }
    bp_log("Success: Installed $n of " . count($pos) . " {$kind}s.");
}

function bp_cli_plugin_install($pos, $assoc)
{
    bp_cli_install('plugin', $pos, $assoc);
}

function bp_cli_theme_install($pos, $assoc)
{
    bp_cli_install('theme', $pos, $assoc);
}

function bp_cli_plugin_slug($file)
{
    return dirname($file) === '.' ? basename($file, '.php') : dirname($file);
}

// bp_cli_plugin_file finds an installed plugin by its slug (its folder,
// or its file's name for a single-file plugin) or its file.
function bp_cli_plugin_file($slug)
{
    foreach (array_keys(get_plugins()) as $file) {
        if ($file === $slug || bp_cli_plugin_slug($file) === $slug) {
            return $file;
        }
    }
    return null;
}

function bp_cli_plugin_toggle($pos, $assoc, $on)
{
    $verb = $on ? 'activate' : 'deactivate';
    bp_cli_flags($assoc, array('all'), "plugin $verb");
    wp_clean_plugins_cache(false);
    if (bp_cli_flag($assoc, 'all')) {
        $pos = array();
        foreach (array_keys(get_plugins()) as $file) {
            if (is_plugin_active($file) !== $on) {
                $pos[] = bp_cli_plugin_slug($file);
            }
        }
    } else {
        bp_cli_args($pos, 1, -1, "plugin $verb <plugin>... [--all]");
    }
    $missing = 0;
    $failed = array();
    $done = 0;
    foreach ($pos as $slug) {
        $file = bp_cli_plugin_file($slug);
        if ($file === null) {
            bp_log("Warning: The '$slug' plugin could not be found.");
            $missing++;
            continue;
        }
        if ($on) {
            if (is_plugin_active($file)) {
                bp_log("Warning: Plugin '$slug' is already active.");
                continue;
            }
            $GLOBALS['bp']['phase'] = array('activation_failed', "Activating the plugin $slug");
            $r = activate_plugin($file);
            $GLOBALS['bp']['phase'] = null;
            if (is_wp_error($r)) {
                $msg = trim(preg_replace('/\s+/', ' ', strip_tags($r->get_error_message())));
                bp_log("Warning: Failed to activate plugin. $msg");
                $failed[] = "$slug ($msg)";
                continue;
            }
            bp_log("Plugin '$slug' activated.");
        } else {
            if (!is_plugin_active($file)) {
                bp_log("Warning: Plugin '$slug' isn't active.");
                continue;
            }
            deactivate_plugins($file);
            bp_log("Plugin '$slug' deactivated.");
        }
        $done++;
    }
    if ($missing || $failed) {
        $what = $failed ? "could not $verb " . implode(', ', $failed) : "$missing plugin(s) could not be found";
        bp_fail($failed ? 'activation_failed' : 'not_found', "wp-cli: $what.");
    }
    bp_log('Success: ' . ucfirst($verb) . "d $done of " . count($pos) . ' plugins.');
}

function bp_cli_plugin_activate($pos, $assoc)
{
    bp_cli_plugin_toggle($pos, $assoc, true);
}

function bp_cli_plugin_deactivate($pos, $assoc)
{
    bp_cli_plugin_toggle($pos, $assoc, false);
}

function bp_cli_theme_activate($pos, $assoc)
{
    bp_cli_flags($assoc, array(), 'theme activate');
    bp_cli_args($pos, 1, 1, 'theme activate <theme>');
    $slug = $pos[0];
    bp_valid_folder($slug, 'the theme');
    $t = wp_get_theme($slug);
    if (!$t->exists()) {
        bp_fail('not_found', "wp-cli: The '$slug' theme could not be found.");
    }
    if (get_option('stylesheet') === $slug) {
        bp_log("Warning: The '" . $t->get('Name') . "' theme is already active.");
        return;
    }
    bp_activate_theme($slug);
    bp_log("Success: Switched to '" . $t->get('Name') . "' theme.");
}

// ---- rewrite ----------------------------------------------------------------------

// bp_cli_htaccess writes WordPress's rewrite rules into .htaccess: the
// sandbox's Apache has mod_rewrite, and pretty permalinks need the rules
// (WP-CLI only writes them with --hard and some configuration).
function bp_cli_htaccess()
{
    if (get_option('permalink_structure') === '') {
        return;
    }
    require_once ABSPATH . 'wp-admin/includes/misc.php';
    require_once ABSPATH . 'wp-admin/includes/file.php';
    $GLOBALS['is_apache'] = true;
    add_filter('got_rewrite', '__return_true');
    $path = bp_site_path(get_home_path() . '.htaccess', '.htaccess', true);
    if (is_link($path)) {
        @unlink($path);
    }
    if (save_mod_rewrite_rules()) {
        bp_log('wrote the rewrite rules to /wordpress/.htaccess');
    } else {
        bp_log('Warning: could not write /wordpress/.htaccess');
    }
}

function bp_cli_rewrite_structure($pos, $assoc)
{
    global $wp_rewrite;
    bp_cli_flags($assoc, array('category-base', 'tag-base', 'hard'), 'rewrite structure');
    bp_cli_args($pos, 1, 1, 'rewrite structure <permastruct> [--category-base=<base>] [--tag-base=<base>] [--hard]');
    $s = $pos[0] === 'default' ? '' : $pos[0];
    if ($s !== '') {
        $s = preg_replace('#/+#', '/', '/' . str_replace('#', '', $s));
    }
    $wp_rewrite->set_permalink_structure($s);
    foreach (array('category-base' => 'set_category_base', 'tag-base' => 'set_tag_base') as $k => $fn) {
        if (isset($assoc[$k])) {
            $b = (string) $assoc[$k];
            if ($b !== '') {
                $b = preg_replace('#/+#', '/', '/' . str_replace('#', '', $b));
            }
            $wp_rewrite->$fn($b);
        }
    }
    bp_log('Success: Rewrite structure set.');
    bp_cli_rewrite_flush(array(), array());
}

function bp_cli_rewrite_flush($pos, $assoc)
{
    bp_cli_flags($assoc, array('hard'), 'rewrite flush');
    bp_cli_args($pos, 0, 0, 'rewrite flush [--hard]');
    global $wp_rewrite;
    $wp_rewrite->init();
    flush_rewrite_rules(false);
    bp_cli_htaccess();
    if (!get_option('rewrite_rules')) {
        bp_log("Warning: Rewrite rules are empty, possibly because of a missing permalink_structure option.");
    } else {
        bp_log('Success: Rewrite rules flushed.');
    }
}

// ---- search-replace ------------------------------------------------------------------

// bp_sr_replace replaces in a value, serialized data included (decoded,
// replaced, encoded again, so lengths stay right). Objects are left as
// they are: they are never decoded into real classes.
function bp_sr_replace($v, $old, $new, &$skippedObjects)
{
    if (is_string($v)) {
        if (is_serialized($v)) {
            $t = trim($v);
            $u = @unserialize($t, array('allowed_classes' => false));
            if ($u !== false || $t === 'b:0;') {
                $r = bp_sr_replace($u, $old, $new, $skippedObjects);
                return $r === $u ? $v : serialize($r);
            }
        }
        return str_replace($old, $new, $v);
    }
    if (is_array($v)) {
        foreach ($v as $k => $x) {
            $v[$k] = bp_sr_replace($x, $old, $new, $skippedObjects);
        }
        return $v;
    }
    if (is_object($v)) {
        $skippedObjects++;
    }
    return $v;
}

function bp_cli_search_replace($pos, $assoc)
{
    global $wpdb;
    bp_cli_flags($assoc, array('dry-run', 'precise', 'all-tables', 'all-tables-with-prefix', 'skip-tables', 'skip-columns',
        'include-columns', 'report', 'report-changed-only', 'recurse-objects', 'format'), 'search-replace');
    bp_cli_args($pos, 2, -1, 'search-replace <old> <new> [<table>...] [--dry-run] [--precise] [--all-tables]');
    $old = array_shift($pos);
    $new = array_shift($pos);
    if ($old === '') {
        bp_fail('invalid', 'wp-cli: the search string is empty');
    }
    if ($old === $new) {
        bp_log("Warning: Replacement value '$old' is identical to search value '$new'. Skipping operation.");
        return;
    }
    $dry = (bool) bp_cli_flag($assoc, 'dry-run');
    $all = $wpdb->get_col('SHOW TABLES');
    if ($pos) {
        $tables = array();
        foreach ($pos as $pat) {
            $hit = false;
            foreach ($all as $t) {
                if ($t === $pat || (strpbrk($pat, '*?') !== false && fnmatch($pat, $t))) {
                    $tables[] = $t;
                    $hit = true;
                }
            }
            if (!$hit) {
                bp_fail('not_found', "wp-cli: Couldn't find any tables matching: $pat");
            }
        }
    } elseif (bp_cli_flag($assoc, 'all-tables')) {
        $tables = $all;
    } elseif (bp_cli_flag($assoc, 'all-tables-with-prefix')) {
        $tables = array_values(array_filter($all, function ($t) use ($wpdb) {
            return strpos($t, $wpdb->prefix) === 0;
        }));
    } else {
        $tables = array_values(array_intersect(array_values($wpdb->tables('all', true)), $all));
    }
    $skipTables = array_filter(explode(',', (string) bp_cli_flag($assoc, 'skip-tables', '')));
    $skipCols = array_filter(explode(',', (string) bp_cli_flag($assoc, 'skip-columns', '')));
    $onlyCols = array_filter(explode(',', (string) bp_cli_flag($assoc, 'include-columns', '')));
    $changedOnly = (bool) bp_cli_flag($assoc, 'report-changed-only');
    $report = bp_cli_flag($assoc, 'report', true) && bp_cli_flag($assoc, 'format', 'table') !== 'count';
    $total = 0;
    $objects = 0;
    $rows = array();
    $like = '%' . $wpdb->esc_like($old) . '%';
    foreach (array_unique($tables) as $table) {
        foreach ($skipTables as $pat) {
            if (fnmatch($pat, $table)) {
                continue 2;
            }
        }
        $cols = $wpdb->get_results('DESCRIBE `' . str_replace('`', '``', $table) . '`');
        $keys = array();
        $text = array();
        foreach ($cols as $c) {
            if ($c->Key === 'PRI') {
                $keys[] = $c->Field;
            }
            if (stripos($c->Type, 'text') !== false || stripos($c->Type, 'varchar') !== false) {
                $text[] = $c->Field;
            }
        }
        if (!$keys) {
            bp_log("Warning: No primary keys for table '$table'; skipped.");
            continue;
        }
        $tq = '`' . str_replace('`', '``', $table) . '`';
        foreach ($text as $col) {
            if (in_array($col, $skipCols, true) || ($onlyCols && !in_array($col, $onlyCols, true))) {
                continue;
            }
            $cq = '`' . str_replace('`', '``', $col) . '`';
            $kq = implode(', ', array_map(function ($k) {
                return '`' . str_replace('`', '``', $k) . '`';
            }, $keys));
            $found = $wpdb->get_results($wpdb->prepare("SELECT $kq, $cq AS bp_value FROM $tq WHERE $cq LIKE BINARY %s", $like), ARRAY_A);
            $n = 0;
            foreach ((array) $found as $row) {
                $value = $row['bp_value'];
                $repl = bp_sr_replace($value, $old, $new, $objects);
                if ($repl === $value) {
                    continue;
                }
                $n++;
                if (!$dry) {
                    $where = array();
                    foreach ($keys as $k) {
                        $where[$k] = $row[$k];
                    }
                    if ($wpdb->update($table, array($col => $repl), $where) === false) {
                        bp_fail('sql_error', "wp-cli: search-replace: updating $table.$col failed: " . $wpdb->last_error);
                    }
                }
            }
            $total += $n;
            if (!$changedOnly || $n > 0) {
                $rows[] = "$table\t$col\t$n\tPHP";
            }
        }
    }
    if ($objects) {
        bp_log("Warning: $objects serialized objects were left as they are (their classes are not loaded); replacements might not be complete.");
    }
    if ($report && $rows) {
        bp_log("Table\tColumn\tReplacements\tType\n" . implode("\n", $rows));
    }
    if (!$dry) {
        wp_cache_flush();
    }
    if (bp_cli_flag($assoc, 'format', 'table') === 'count') {
        bp_log((string) $total);
        return;
    }
    bp_log($dry ? "Success: $total replacement" . ($total === 1 ? '' : 's') . ' to be made.'
        : "Success: Made $total replacement" . ($total === 1 ? '' : 's') . '.');
}
