<?php
// Archives a directory as wp-content/ in two steps (two gzip members),
// using only the plugin's pure files. Usage: php tar_driver.php SRC OUT WORK
define( 'SBX_PURE', true );
$inc = __DIR__ . '/../plugin/sandboxd-connector/includes/';
require $inc . 'tar-writer.php';
require $inc . 'file-rules.php';
require $inc . 'exporter-files.php';

list( , $src, $out, $work ) = $argv;
$far  = microtime( true ) + 60;
$list = Sbx_File_Exporter::list_init( $work, $src, 'wp-content', array() );
$steps = 0;
while ( ! Sbx_File_Exporter::list_step( $list, $work, new Sbx_File_Rules(), $far ) ) {
	$steps++;
}
$arc = Sbx_File_Exporter::archive_init( true );
// First request: a small byte budget stops it part way (inside a file).
$done1 = Sbx_File_Exporter::archive_step( $arc, $work, $out, $far, (int) getenv( 'SBX_FIRST_BUDGET' ) );
// Second request: the rest.
$done2 = Sbx_File_Exporter::archive_step( $arc, $work, $out, $far );
echo json_encode(
	array(
		'done1'    => $done1,
		'done2'    => $done2,
		'members'  => $arc['members'],
		'size'     => $arc['size'],
		'entries'  => $list['entries'],
		'symlinks' => $list['symlinks'],
		'notes'    => array_merge( $list['notes'], $arc['notes'] ),
	)
);
