<?php
// Prints PKCE values, an authorize URL and service URL checks as JSON.
define( 'SBX_PURE', true );
require __DIR__ . '/../plugin/sandboxd-connector/includes/pkce.php';
require __DIR__ . '/../plugin/sandboxd-connector/includes/url-rules.php';

$pairs = array();
for ( $i = 0; $i < 50; $i++ ) {
	$v       = Sbx_Pkce::verifier();
	$pairs[] = array(
		'verifier'  => $v,
		'challenge' => Sbx_Pkce::challenge( $v ),
		'state'     => Sbx_Pkce::state(),
	);
}
$urls = array();
foreach ( json_decode( stream_get_contents( STDIN ), true ) as $u ) {
	$urls[ $u ] = Sbx_Url_Rules::normalize_base( $u );
}
echo json_encode(
	array(
		'pairs' => $pairs,
		'url'   => Sbx_Pkce::authorize_url( 'http://127.0.0.1:8080', 'cl_1', 'http://live.test/wp-admin/admin.php?page=sandboxd-connector&sbx=callback', 'st', 'ch' ),
		'bases' => $urls,
	)
);
