<?php
// Reads {"values": [b64|null...], "rows": [[b64|null...]...], "max": N} on
// stdin; prints each value escaped and quoted, and the INSERT statements.
define( 'SBX_PURE', true );
require __DIR__ . '/../plugin/sandboxd-connector/includes/sql-writer.php';

$in  = json_decode( stream_get_contents( STDIN ), true );
$dec = function ( $v ) {
	return null === $v ? null : base64_decode( $v );
};
$esc = array();
foreach ( $in['values'] as $v ) {
	$v     = $dec( $v );
	$esc[] = array(
		'escaped' => null === $v ? null : base64_encode( Sbx_Sql::escape( $v ) ),
		'quoted'  => base64_encode( Sbx_Sql::quote( $v ) ),
	);
}
$b   = new Sbx_Insert_Builder( 'wp_t`x', null, $in['max'] );
$sql = '';
foreach ( $in['rows'] as $row ) {
	$sql .= $b->add( array_map( $dec, $row ) );
}
$sql .= $b->finish();
echo json_encode(
	array(
		'values'  => $esc,
		'sql'     => base64_encode( $sql ),
		'header'  => Sbx_Sql::header(),
		'prelude' => Sbx_Sql::table_prelude( 'wp_t`x', "CREATE TABLE `wp_t``x` (`a` int)" ),
		'like'    => Sbx_Sql::like_escape( 'wp_50%\\' ),
	)
);
