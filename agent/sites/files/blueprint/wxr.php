<?php
// importWxr: a WXR (WordPress eXtended RSS, versions 1.0 to 1.2) importer
// for the Blueprint runner, as no WordPress Importer plugin is at hand.
// It follows what the WordPress Importer does: authors are mapped to
// users, categories, tags and terms made (parents first; a post's terms
// lazily, as it names them), every item inserted whatever its post type,
// keeping its ID when that is free, with its meta, comments and terms;
// then parents, featured images and menu items are pointed at the new
// IDs and attachment URLs in content at the new files. Attachment files
// were fetched beforehand (the site has no network): one that was not
// becomes an attachment post without a file.

const BP_WXR_NS_DC = 'http://purl.org/dc/elements/1.1/';
const BP_WXR_NS_CONTENT = 'http://purl.org/rss/1.0/modules/content/';

function bp_wxr_import()
{
    require_once ABSPATH . 'wp-admin/includes/admin.php';
    list($path, $name) = bp_file_ref(bp_arg('file'), 'importWxr file');
    $imp = new BP_WXR_Importer();
    $imp->parse($path, $name);
    $imp->import();
}

// bp_wxr_value decodes a serialized value as WordPress's importer does,
// but never into objects of real classes (a hostile file could pick one
// whose destructor does harm).
function bp_wxr_value($v)
{
    if (!is_string($v) || !is_serialized($v)) {
        return $v;
    }
    $t = trim($v);
    $u = @unserialize($t, array('allowed_classes' => false));
    if ($u === false && $t !== 'b:0;') {
        return $v;
    }
    return $u;
}

// bp_wxr_has_object tells a decoded value holding objects: WordPress's
// meta functions would walk into them (to unslash) and fail on classes
// that are not loaded, so such values are stored exactly as exported.
function bp_wxr_has_object($v)
{
    if (is_object($v)) {
        return true;
    }
    if (is_array($v)) {
        foreach ($v as $x) {
            if (bp_wxr_has_object($x)) {
                return true;
            }
        }
    }
    return false;
}

class BP_WXR_Importer
{
    private $name;
    private $version;
    private $bases = array();
    private $authors = array();
    private $categories = array();
    private $tags = array();
    private $terms = array();
    private $posts = array();

    private $importComments;
    private $importUsers;
    private $authorsMode;
    private $authorsMap;
    private $rewrite;
    private $fetchAttachments;
    private $files;
    private $defaultAuthor = 0;

    private $userFor = array();      // WXR login => user ID
    private $userForId = array();    // WXR author_id => user ID
    private $termMap = array();      // WXR term_id => term ID
    private $postMap = array();      // WXR post ID => post ID
    private $orphans = array();      // post ID => WXR parent ID
    private $featured = array();     // post ID => WXR attachment ID
    private $menuItems = array();    // post IDs of menu items
    private $imported = array();     // post IDs made by this import
    private $urlRemap = array();     // old attachment URL => new
    private $urlPairs = array();     // base URLs => the site's
    private $skippedTax = array();
    private $lines = 0;

    private $n = array('posts' => 0, 'terms' => 0, 'comments' => 0, 'attachments' => 0, 'nofile' => 0,
        'existing' => 0, 'failed' => 0, 'users' => 0);

    public function __construct()
    {
        $this->importComments = bp_bool(bp_arg('importComments'), true);
        $this->importUsers = bp_bool(bp_arg('importUsers'), false);
        $this->authorsMode = (string) bp_arg('authorsMode', 'default-author');
        if (!in_array($this->authorsMode, array('create', 'default-author', 'map'), true)) {
            bp_fail('invalid', 'importWxr: authorsMode must be create, default-author or map');
        }
        $map = bp_arg('authorsMap', array());
        $this->authorsMap = is_array($map) ? $map : array();
        $this->rewrite = bp_bool(bp_arg('rewriteUrls'), true);
        $this->fetchAttachments = bp_bool(bp_arg('fetchAttachments'), true);
        $att = bp_req('attachments', array());
        $this->files = is_array($att) ? $att : array();
        if (bp_arg('importer') === 'data-liberation') {
            bp_log('note: importer data-liberation is not available; the built-in importer is used');
        }
    }

    private function note($line)
    {
        // A file with thousands of failures would drown the summary.
        if (++$this->lines <= 200) {
            bp_log($line);
        }
    }

    // ---- Parsing -----------------------------------------------------------

    public function parse($path, $name)
    {
        $this->name = $name;
        $prev = libxml_use_internal_errors(true);
        libxml_clear_errors();
        $data = @file_get_contents($path);
        if ($data === false) {
            bp_fail('not_found', "importWxr: cannot read $name");
        }
        if (PHP_VERSION_ID < 80000) {
            // PHP 8 never loads external entities; older PHP must be told
            // (which also keeps it from loading files: hence a string).
            @libxml_disable_entity_loader(true);
        }
        $xml = simplexml_load_string($data, 'SimpleXMLElement', LIBXML_NONET);
        unset($data);
        if ($xml === false) {
            $errs = libxml_get_errors();
            $e = $errs ? $errs[0] : null;
            libxml_clear_errors();
            libxml_use_internal_errors($prev);
            bp_fail('invalid', "importWxr: $name is not valid XML" . ($e ? ': ' . trim($e->message) . " (line {$e->line}, column {$e->column})" : ''));
        }
        libxml_use_internal_errors($prev);
        if ($xml->getName() !== 'rss' || !isset($xml->channel)) {
            bp_fail('invalid', "importWxr: $name is not a WXR file (no rss channel)");
        }
        $ns = $xml->getDocNamespaces();
        $wp = isset($ns['wp']) ? $ns['wp'] : 'http://wordpress.org/export/1.1/';
        $ex = isset($ns['excerpt']) ? $ns['excerpt'] : 'http://wordpress.org/export/1.1/excerpt/';
        $channel = $xml->channel;
        $cw = $channel->children($wp);
        $this->version = trim((string) $cw->wxr_version);
        if (!preg_match('/^\d+\.\d+$/', $this->version)) {
            bp_fail('invalid', "importWxr: $name is not a WXR file (no wp:wxr_version)");
        }
        if (version_compare($this->version, '1.2', '>')) {
            bp_log("note: $name is WXR {$this->version}; this importer knows 1.0 to 1.2");
        }
        foreach (array((string) $cw->base_site_url, (string) $cw->base_blog_url) as $b) {
            $b = rtrim(trim($b), '/');
            $h = parse_url($b, PHP_URL_HOST);
            if ($b !== '' && is_string($h) && $h !== '' && preg_match('#^https?://#i', $b)) {
                $this->bases[$b] = true;
            }
        }
        foreach ($cw->author as $a) {
            $aw = $a->children($wp);
            $login = (string) $aw->author_login;
            $this->authors[$login] = array(
                'id' => (int) $aw->author_id, 'login' => $login, 'email' => (string) $aw->author_email,
                'display_name' => (string) $aw->author_display_name, 'first_name' => (string) $aw->author_first_name,
                'last_name' => (string) $aw->author_last_name,
            );
        }
        foreach ($cw->category as $c) {
            $t = $c->children($wp);
            $this->categories[] = array('id' => (int) $t->term_id, 'taxonomy' => 'category', 'slug' => (string) $t->category_nicename,
                'name' => (string) $t->cat_name, 'parent' => (string) $t->category_parent,
                'description' => (string) $t->category_description, 'meta' => $this->termMeta($t, $wp));
        }
        foreach ($cw->tag as $c) {
            $t = $c->children($wp);
            $this->tags[] = array('id' => (int) $t->term_id, 'taxonomy' => 'post_tag', 'slug' => (string) $t->tag_slug,
                'name' => (string) $t->tag_name, 'parent' => '', 'description' => (string) $t->tag_description,
                'meta' => $this->termMeta($t, $wp));
        }
        foreach ($cw->term as $c) {
            $t = $c->children($wp);
            $this->terms[] = array('id' => (int) $t->term_id, 'taxonomy' => (string) $t->term_taxonomy, 'slug' => (string) $t->term_slug,
                'name' => (string) $t->term_name, 'parent' => (string) $t->term_parent,
                'description' => (string) $t->term_description, 'meta' => $this->termMeta($t, $wp));
        }
        foreach ($channel->item as $item) {
            $w = $item->children($wp);
            $p = array(
                'post_title' => (string) $item->title,
                'guid' => (string) $item->guid,
                'post_author' => (string) $item->children(BP_WXR_NS_DC)->creator,
                'post_content' => (string) $item->children(BP_WXR_NS_CONTENT)->encoded,
                'post_excerpt' => (string) $item->children($ex)->encoded,
                'post_id' => (int) $w->post_id,
                'post_date' => (string) $w->post_date,
                'post_date_gmt' => (string) $w->post_date_gmt,
                'comment_status' => (string) $w->comment_status,
                'ping_status' => (string) $w->ping_status,
                'post_name' => (string) $w->post_name,
                'status' => (string) $w->status,
                'post_parent' => (int) $w->post_parent,
                'menu_order' => (int) $w->menu_order,
                'post_type' => (string) $w->post_type,
                'post_password' => (string) $w->post_password,
                'is_sticky' => (int) $w->is_sticky,
                'attachment_url' => isset($w->attachment_url) ? (string) $w->attachment_url : '',
                'terms' => array(), 'meta' => array(), 'comments' => array(),
            );
            foreach ($item->category as $c) {
                $att = $c->attributes();
                if (isset($att['nicename']) && isset($att['domain'])) {
                    $p['terms'][] = array('name' => (string) $c, 'slug' => (string) $att['nicename'], 'domain' => (string) $att['domain']);
                }
            }
            foreach ($w->postmeta as $m) {
                $mw = $m->children($wp);
                $p['meta'][] = array('key' => (string) $mw->meta_key, 'value' => (string) $mw->meta_value);
            }
            foreach ($w->comment as $c) {
                $cw2 = $c->children($wp);
                $meta = array();
                foreach ($cw2->commentmeta as $m) {
                    $mw = $m->children($wp);
                    $meta[] = array('key' => (string) $mw->meta_key, 'value' => (string) $mw->meta_value);
                }
                $p['comments'][] = array(
                    'id' => (int) $cw2->comment_id,
                    'comment_author' => (string) $cw2->comment_author,
                    'comment_author_email' => (string) $cw2->comment_author_email,
                    'comment_author_IP' => (string) $cw2->comment_author_IP,
                    'comment_author_url' => (string) $cw2->comment_author_url,
                    'comment_date' => (string) $cw2->comment_date,
                    'comment_date_gmt' => (string) $cw2->comment_date_gmt,
                    'comment_content' => (string) $cw2->comment_content,
                    'comment_approved' => (string) $cw2->comment_approved,
                    'comment_type' => (string) $cw2->comment_type,
                    'comment_parent' => (int) $cw2->comment_parent,
                    'user_id' => (int) $cw2->comment_user_id,
                    'meta' => $meta,
                );
            }
            $this->posts[] = $p;
        }
    }

    private function termMeta($t, $wp)
    {
        $meta = array();
        foreach ($t->termmeta as $m) {
            $mw = $m->children($wp);
            $meta[] = array('key' => (string) $mw->meta_key, 'value' => (string) $mw->meta_value);
        }
        return $meta;
    }

    // ---- Importing ---------------------------------------------------------

    public function import()
    {
        if (!defined('WP_IMPORTING')) {
            define('WP_IMPORTING', true);
        }
        kses_remove_filters();
        wp_defer_term_counting(true);
        wp_defer_comment_counting(true);
        $this->setUpUrls();
        $this->setUpAuthors();
        foreach (array_merge($this->categories, $this->tags, $this->terms) as $t) {
            $this->importTerm($t);
        }
        $this->fixTermParents();
        foreach ($this->posts as $p) {
            $this->importPost($p);
        }
        $this->backfill();
        wp_defer_term_counting(false);
        wp_defer_comment_counting(false);
        wp_cache_flush();
        if ($this->skippedTax) {
            $parts = array();
            foreach ($this->skippedTax as $tax => $n) {
                $parts[] = "$tax ($n)";
            }
            bp_log('skipped terms of taxonomies this site does not have (a plugin or theme registers them): ' . implode(', ', $parts));
        }
        if ($this->lines > 200) {
            bp_log('… ' . ($this->lines - 200) . ' more notes');
        }
        $n = $this->n;
        $extra = array();
        if ($n['existing']) {
            $extra[] = "{$n['existing']} already there (left as they were)";
        }
        if ($n['failed']) {
            $extra[] = "{$n['failed']} failed";
        }
        if ($n['users']) {
            $extra[] = "{$n['users']} users created";
        }
        bp_log("imported {$n['posts']} posts, {$n['terms']} terms, {$n['comments']} comments, {$n['attachments']} attachments ({$n['nofile']} without files) from {$this->name}"
            . ($extra ? '; ' . implode(', ', $extra) : ''));
    }

    private function setUpUrls()
    {
        $site = bp_site_url();
        $pairs = array();
        if ($this->rewrite) {
            foreach (array_keys($this->bases) as $b) {
                // The same site under the other scheme is the same site.
                $other = stripos($b, 'https://') === 0 ? 'http://' . substr($b, 8) : 'https://' . substr($b, 7);
                foreach (array($b, $other) as $from) {
                    if (strcasecmp($from, $site) !== 0) {
                        $pairs[$from] = $site;
                    }
                }
            }
            $map = bp_arg('urlMapping', array());
            foreach (is_array($map) ? $map : array() as $from => $to) {
                if (is_string($to) && (string) $from !== '') {
                    $pairs[rtrim((string) $from, '/')] = rtrim($to, '/');
                }
            }
        }
        // Block attributes hold URLs JSON-escaped (https:\/\/...).
        foreach ($pairs as $from => $to) {
            $this->urlPairs[$from] = $to;
            $this->urlPairs[str_replace('/', '\\/', $from)] = str_replace('/', '\\/', $to);
        }
        uksort($this->urlPairs, function ($a, $b) {
            return strlen($b) - strlen($a);
        });
    }

    // rewriteUrls: the exporting site's URLs become this site's; a URL
    // only matches whole (https://a.com does not match in https://a.com.au).
    private function rw($s)
    {
        if (!$this->urlPairs || !is_string($s) || $s === '') {
            return $s;
        }
        $alts = array();
        foreach (array_keys($this->urlPairs) as $from) {
            $alts[] = preg_quote($from, '#');
        }
        $pairs = $this->urlPairs;
        $r = preg_replace_callback('#(' . implode('|', $alts) . ')(?![A-Za-z0-9.:_-])#i', function ($m) use ($pairs) {
            foreach ($pairs as $from => $to) {
                if (strcasecmp($from, $m[1]) === 0) {
                    return $to;
                }
            }
            return $m[1];
        }, $s);
        return $r === null ? $s : $r;
    }

    private function rwDeep($v)
    {
        if (is_string($v)) {
            return $this->rw($v);
        }
        if (is_array($v)) {
            foreach ($v as $k => $x) {
                $v[$k] = $this->rwDeep($x);
            }
        }
        return $v;
    }

    private function setUpAuthors()
    {
        $want = (string) bp_arg('defaultAuthorUsername', 'admin');
        $u = get_user_by('login', $want);
        if (!$u) {
            $u = isset($GLOBALS['bp']['admin']) ? $GLOBALS['bp']['admin'] : false;
            if (bp_arg('defaultAuthorUsername') !== null && $u) {
                bp_log("there is no user $want: posts without a known author go to {$u->user_login}");
            }
        }
        $this->defaultAuthor = $u ? (int) $u->ID : get_current_user_id();
        foreach ($this->authors as $login => $a) {
            $id = $this->userOf($login);
            if ($a['id']) {
                $this->userForId[$a['id']] = $id;
            }
        }
    }

    // userOf maps a WXR author (a login) to a user of this site.
    private function userOf($login)
    {
        if (isset($this->userFor[$login])) {
            return $this->userFor[$login];
        }
        $id = 0;
        if ($this->authorsMode === 'map' && isset($this->authorsMap[$login])) {
            $u = get_user_by('login', (string) $this->authorsMap[$login]);
            if ($u) {
                $id = (int) $u->ID;
            } else {
                $this->note("authorsMap: there is no user {$this->authorsMap[$login]} (for $login)");
            }
        }
        if (!$id && $login !== '') {
            $u = get_user_by('login', $login);
            if ($u) {
                $id = (int) $u->ID;
            }
        }
        // Users are made for the authors the file lists (any author of a
        // WXR 1.0 file, which lists none).
        if (!$id && $login !== '' && ($this->importUsers || $this->authorsMode === 'create')
            && (isset($this->authors[$login]) || !$this->authors)) {
            $a = isset($this->authors[$login]) ? $this->authors[$login] : array('email' => '', 'display_name' => $login, 'first_name' => '', 'last_name' => '');
            $r = wp_insert_user(array(
                'user_login' => $login, 'user_email' => $a['email'], 'display_name' => $a['display_name'] !== '' ? $a['display_name'] : $login,
                'first_name' => $a['first_name'], 'last_name' => $a['last_name'], 'user_pass' => wp_generate_password(24),
                'role' => get_option('default_role', 'subscriber'),
            ));
            if (is_wp_error($r)) {
                $this->note("could not create the user $login: " . $r->get_error_message());
            } else {
                $id = (int) $r;
                $this->n['users']++;
                bp_log("created the user $login");
            }
        }
        if (!$id) {
            $id = $this->defaultAuthor;
        }
        return $this->userFor[$login] = $id;
    }

    private function importTerm($t)
    {
        $tax = $t['taxonomy'];
        if ($t['slug'] === '' && $t['name'] === '') {
            return;
        }
        if (!taxonomy_exists($tax)) {
            $this->skippedTax[$tax] = (isset($this->skippedTax[$tax]) ? $this->skippedTax[$tax] : 0) + 1;
            return;
        }
        $ex = term_exists($t['slug'] !== '' ? $t['slug'] : $t['name'], $tax);
        if ($ex) {
            $this->termMap[$t['id']] = (int) (is_array($ex) ? $ex['term_id'] : $ex);
            return;
        }
        $args = array('slug' => $t['slug'], 'description' => $t['description']);
        $parent = 0;
        if ($t['parent'] !== '' && is_taxonomy_hierarchical($tax)) {
            $pe = term_exists($t['parent'], $tax);
            $parent = $pe ? (int) (is_array($pe) ? $pe['term_id'] : $pe) : 0;
            $args['parent'] = $parent;
        }
        $r = wp_insert_term(wp_slash($t['name'] !== '' ? $t['name'] : $t['slug']), $tax, wp_slash($args));
        if (is_wp_error($r)) {
            $this->note("could not import the $tax term {$t['slug']}: " . $r->get_error_message());
            return;
        }
        $id = (int) $r['term_id'];
        $this->termMap[$t['id']] = $id;
        $this->n['terms']++;
        if ($t['parent'] !== '' && !$parent && is_taxonomy_hierarchical($tax)) {
            $this->pendingParents[] = array($id, $tax, $t['parent']);
        }
        foreach ($t['meta'] as $m) {
            $this->addMeta('term', $id, $m['key'], $m['value'], bp_wxr_value($m['value']));
        }
    }

    private $pendingParents = array();

    // A term listed before its parent gets it once all are in.
    private function fixTermParents()
    {
        foreach ($this->pendingParents as $x) {
            list($id, $tax, $slug) = $x;
            $pe = term_exists($slug, $tax);
            if ($pe) {
                wp_update_term($id, $tax, array('parent' => (int) (is_array($pe) ? $pe['term_id'] : $pe)));
            }
        }
    }

    // termsOf makes (if need be) and returns the terms an item names.
    private function termsOf($p)
    {
        $set = array();
        foreach ($p['terms'] as $t) {
            $tax = $t['domain'] === 'tag' ? 'post_tag' : $t['domain'];
            if (!taxonomy_exists($tax)) {
                $this->skippedTax[$tax] = (isset($this->skippedTax[$tax]) ? $this->skippedTax[$tax] : 0) + 1;
                continue;
            }
            $ex = term_exists($t['slug'], $tax);
            $id = $ex ? (int) (is_array($ex) ? $ex['term_id'] : $ex) : 0;
            if (!$id) {
                $r = wp_insert_term(wp_slash($t['name'] !== '' ? $t['name'] : $t['slug']), $tax, array('slug' => $t['slug']));
                if (is_wp_error($r)) {
                    $this->note("could not import the $tax term {$t['slug']}: " . $r->get_error_message());
                    continue;
                }
                $id = (int) $r['term_id'];
                $this->n['terms']++;
            }
            $set[$tax][] = $id;
        }
        return $set;
    }

    private function importPost($p)
    {
        $type = $p['post_type'] !== '' ? $p['post_type'] : 'post';
        $old = $p['post_id'];
        if ($p['status'] === 'auto-draft') {
            return;
        }
        $title = $p['post_title'];
        $existing = $type === 'nav_menu_item' ? 0 : (int) post_exists($title, '', $p['post_date'], $type);
        if ($existing && get_post_type($existing) === $type) {
            $this->postMap[$old] = $existing;
            $this->n['existing']++;
            return;
        }
        $parent = 0;
        if ($p['post_parent']) {
            if (isset($this->postMap[$p['post_parent']])) {
                $parent = $this->postMap[$p['post_parent']];
            }
        }
        $data = array(
            'post_author' => $this->userOf($p['post_author']),
            'post_date' => $p['post_date'],
            'post_date_gmt' => $p['post_date_gmt'],
            'post_content' => $this->rw($p['post_content']),
            'post_excerpt' => $this->rw($p['post_excerpt']),
            'post_title' => $title,
            'post_status' => $p['status'] !== '' ? $p['status'] : 'publish',
            'post_name' => $p['post_name'],
            'comment_status' => $p['comment_status'] !== '' ? $p['comment_status'] : 'closed',
            'ping_status' => $p['ping_status'] !== '' ? $p['ping_status'] : 'closed',
            'guid' => $p['guid'],
            'post_parent' => $parent,
            'menu_order' => $p['menu_order'],
            'post_type' => $type,
            'post_password' => $p['post_password'],
        );
        if ($old > 0) {
            $data['import_id'] = $old;
        }
        if ($type === 'attachment') {
            $id = $this->importAttachment($p, $data, $parent);
        } else {
            $id = wp_insert_post(wp_slash($data), true);
            if (!is_wp_error($id)) {
                $this->n['posts']++;
            }
        }
        if (is_wp_error($id) || !$id) {
            $this->n['failed']++;
            $this->note("could not import the $type \"$title\": " . (is_wp_error($id) ? $id->get_error_message() : 'unknown error'));
            return;
        }
        $id = (int) $id;
        if ($old > 0) {
            $this->postMap[$old] = $id;
        }
        $this->imported[] = $id;
        if ($p['post_parent'] && !$parent) {
            $this->orphans[$id] = $p['post_parent'];
        }
        if ($p['is_sticky'] == 1) {
            stick_post($id);
        }
        if ($type === 'nav_menu_item') {
            $this->menuItems[] = $id;
        }
        foreach ($this->termsOf($p) as $tax => $ids) {
            $r = wp_set_post_terms($id, $ids, $tax);
            if (is_wp_error($r)) {
                $this->note("could not set the $tax terms of \"$title\": " . $r->get_error_message());
            }
        }
        $this->importMeta($id, $p);
        if ($this->importComments) {
            $this->importCommentsOf($id, $p['comments']);
        }
    }

    private function importMeta($id, $p)
    {
        foreach ($p['meta'] as $m) {
            $key = $m['key'];
            if ($key === '' || in_array($key, array('_wp_attached_file', '_wp_attachment_metadata', '_edit_lock'), true)) {
                continue;
            }
            $value = bp_wxr_value($m['value']);
            if ($key === '_edit_last') {
                if (!isset($this->userForId[(int) $value])) {
                    continue;
                }
                $value = $this->userForId[(int) $value];
            }
            if ($key === '_thumbnail_id') {
                $this->featured[$id] = (int) $value;
            }
            $this->addMeta('post', $id, $key, $m['value'], $this->rwDeep($value));
        }
    }

    // addMeta stores one meta value: decoded (and its URLs rewritten) when
    // WordPress can handle it, else as the exported bytes.
    private function addMeta($type, $id, $key, $raw, $value)
    {
        if ($key === '') {
            return;
        }
        if (!bp_wxr_has_object($value)) {
            add_metadata($type, $id, wp_slash($key), wp_slash($value));
            return;
        }
        global $wpdb;
        $table = _get_meta_table($type);
        if ($table) {
            $wpdb->insert($table, array($type . '_id' => $id, 'meta_key' => $key, 'meta_value' => $raw));
            wp_cache_delete($id, $type . '_meta');
        }
    }

    private function importCommentsOf($postId, $comments)
    {
        $map = array();
        // Parents first; a reply whose parent never comes is kept at the top.
        $todo = $comments;
        while ($todo) {
            $left = array();
            foreach ($todo as $c) {
                if ($c['comment_parent'] && !isset($map[$c['comment_parent']]) && $this->hasComment($todo, $c['comment_parent'])) {
                    $left[] = $c;
                    continue;
                }
                $map[$c['id']] = $this->importComment($postId, $c, isset($map[$c['comment_parent']]) ? $map[$c['comment_parent']] : 0);
            }
            if (count($left) === count($todo)) {
                foreach ($left as $c) {
                    $map[$c['id']] = $this->importComment($postId, $c, 0);
                }
                break;
            }
            $todo = $left;
        }
    }

    private function hasComment($list, $id)
    {
        foreach ($list as $c) {
            if ($c['id'] === $id) {
                return true;
            }
        }
        return false;
    }

    private function importComment($postId, $c, $parent)
    {
        if (comment_exists($c['comment_author'], $c['comment_date'])) {
            return 0;
        }
        $data = array(
            'comment_post_ID' => $postId,
            'comment_author' => $c['comment_author'],
            'comment_author_email' => $c['comment_author_email'],
            'comment_author_IP' => $c['comment_author_IP'],
            'comment_author_url' => $c['comment_author_url'],
            'comment_date' => $c['comment_date'],
            'comment_date_gmt' => $c['comment_date_gmt'],
            'comment_content' => $this->rw($c['comment_content']),
            'comment_approved' => $c['comment_approved'],
            'comment_type' => $c['comment_type'],
            'comment_parent' => $parent,
            'user_id' => isset($this->userForId[$c['user_id']]) ? $this->userForId[$c['user_id']] : 0,
        );
        $id = wp_insert_comment(wp_slash($data));
        if (!$id) {
            $this->note("could not import a comment of post $postId");
            return 0;
        }
        $this->n['comments']++;
        foreach ($c['meta'] as $m) {
            $this->addMeta('comment', $id, $m['key'], $m['value'], bp_wxr_value($m['value']));
        }
        return (int) $id;
    }

    // importAttachment stores the fetched file (when there is one) in the
    // uploads as WordPress would, and makes the attachment post.
    private function importAttachment($p, $data, $parent)
    {
        $url = $p['attachment_url'] !== '' ? $p['attachment_url'] : $p['guid'];
        $base = basename((string) parse_url($url, PHP_URL_PATH));
        $ft = wp_check_filetype($base);
        $file = false;
        $why = '';
        if (!$this->fetchAttachments) {
            $why = 'fetchAttachments is off';
        } elseif ($url === '' || !isset($this->files[$url])) {
            $why = 'it was not fetched';
        } elseif (!$ft['type']) {
            $why = "its file type ($base) is not allowed";
        } else {
            $src = bp_blob($this->files[$url], "the attachment $url");
            $time = preg_match('/^(\d{4})-(\d{2})/', $p['post_date'], $m) ? $m[1] . '/' . $m[2] : null;
            $up = wp_upload_dir($time);
            if (!empty($up['error'])) {
                bp_fail('write_failed', 'importWxr: the uploads directory cannot be used: ' . $up['error']);
            }
            $dir = bp_site_path($up['path'], 'the uploads directory');
            bp_mkdirs($dir);
            $name = wp_unique_filename($dir, sanitize_file_name($base));
            $file = $dir . '/' . $name;
            if (!@copy($src, $file)) {
                @unlink($file);
                bp_write_failed($file);
            }
            @chmod($file, 0644);
            $newUrl = $up['url'] . '/' . $name;
            $data['guid'] = $newUrl;
            $data['post_mime_type'] = $ft['type'];
        }
        if (!$file) {
            $data['guid'] = $url;
            $data['post_mime_type'] = $ft['type'] ? $ft['type'] : '';
        }
        $data['post_status'] = 'inherit';
        $id = wp_insert_attachment(wp_slash($data), $file, $parent, true);
        if (is_wp_error($id)) {
            if ($file) {
                @unlink($file);
            }
            return $id;
        }
        $this->n['attachments']++;
        if ($file) {
            require_once ABSPATH . 'wp-admin/includes/image.php';
            wp_update_attachment_metadata($id, wp_generate_attachment_metadata($id, $file));
            $this->remapUrl($url, $newUrl);
            if ($p['guid'] !== '' && $p['guid'] !== $url) {
                $this->remapUrl($p['guid'], $newUrl);
            }
        } else {
            $this->n['nofile']++;
            $this->note("attachment \"{$p['post_title']}\" ($url) imported without its file: $why");
        }
        return $id;
    }

    private function remapUrl($old, $new)
    {
        // Content was rewritten to this site's URLs already: the old URL
        // may appear in either form.
        foreach (array_unique(array($old, $this->rw($old))) as $from) {
            $this->urlRemap[$from] = $new;
            // Resized copies (name-300x200.jpg) follow their original.
            $o = pathinfo($from);
            $n = pathinfo($new);
            if (isset($o['extension'], $n['extension'], $o['dirname'], $n['dirname'])) {
                $this->urlRemap[$o['dirname'] . '/' . $o['filename'] . '-'] = $n['dirname'] . '/' . $n['filename'] . '-';
            }
        }
    }

    private function backfill()
    {
        global $wpdb;
        foreach ($this->orphans as $id => $oldParent) {
            if (isset($this->postMap[$oldParent])) {
                $wpdb->update($wpdb->posts, array('post_parent' => $this->postMap[$oldParent]), array('ID' => $id));
                clean_post_cache($id);
            }
        }
        foreach ($this->featured as $id => $oldThumb) {
            if (isset($this->postMap[$oldThumb]) && $this->postMap[$oldThumb] !== $oldThumb) {
                update_post_meta($id, '_thumbnail_id', $this->postMap[$oldThumb]);
            }
        }
        foreach ($this->menuItems as $id) {
            $type = get_post_meta($id, '_menu_item_type', true);
            $obj = (int) get_post_meta($id, '_menu_item_object_id', true);
            if ($type === 'taxonomy' && isset($this->termMap[$obj])) {
                update_post_meta($id, '_menu_item_object_id', $this->termMap[$obj]);
            } elseif ($type === 'post_type' && isset($this->postMap[$obj])) {
                update_post_meta($id, '_menu_item_object_id', $this->postMap[$obj]);
            }
            $parent = (int) get_post_meta($id, '_menu_item_menu_item_parent', true);
            if ($parent && isset($this->postMap[$parent])) {
                update_post_meta($id, '_menu_item_menu_item_parent', $this->postMap[$parent]);
            }
        }
        if ($this->urlRemap && $this->imported) {
            $pairs = array();
            foreach ($this->urlRemap as $from => $to) {
                $pairs[$from] = $to;
                $pairs[str_replace('/', '\\/', $from)] = str_replace('/', '\\/', $to);
            }
            uksort($pairs, function ($a, $b) {
                return strlen($b) - strlen($a);
            });
            foreach ($this->imported as $id) {
                $post = get_post($id);
                if (!$post) {
                    continue;
                }
                $c = strtr($post->post_content, $pairs);
                $e = strtr($post->post_excerpt, $pairs);
                if ($c !== $post->post_content || $e !== $post->post_excerpt) {
                    $wpdb->update($wpdb->posts, array('post_content' => $c, 'post_excerpt' => $e), array('ID' => $id));
                    clean_post_cache($id);
                }
            }
        }
    }
}
