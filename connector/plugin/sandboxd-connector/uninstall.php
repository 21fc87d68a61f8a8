<?php
/**
 * Uninstall: delete the plugin's options, transients, user meta and
 * temporary files.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'WP_UNINSTALL_PLUGIN' ) ) {
	exit;
}

/**
 * Remove a tree without following symlinks.
 *
 * @param string $dir Directory.
 */
function sbx_uninstall_rrmdir( $dir ) {
	if ( is_link( $dir ) || ! is_dir( $dir ) ) {
		if ( file_exists( $dir ) || is_link( $dir ) ) {
			@unlink( $dir );
		}
		return;
	}
	foreach ( (array) @scandir( $dir ) as $i ) {
		if ( '.' !== $i && '..' !== $i ) {
			sbx_uninstall_rrmdir( $dir . '/' . $i );
		}
	}
	@rmdir( $dir );
}

$sbx_job = get_option( 'sbx_job' );
if ( is_array( $sbx_job ) && ! empty( $sbx_job['work'] ) && preg_match( '#/[0-9a-f]{32}$#', $sbx_job['work'] ) ) {
	sbx_uninstall_rrmdir( $sbx_job['work'] );
}
$sbx_up = wp_upload_dir( null, false );
if ( ! empty( $sbx_up['basedir'] ) ) {
	sbx_uninstall_rrmdir( $sbx_up['basedir'] . '/sandboxd-connector' );
}

foreach ( array( 'sbx_service_url', 'sbx_client', 'sbx_token', 'sbx_job', 'sbx_lock' ) as $sbx_opt ) {
	delete_option( $sbx_opt );
}
delete_metadata( 'user', 0, '_sbx_oauth', '', true );

global $wpdb;
$wpdb->query(
	$wpdb->prepare(
		"DELETE FROM {$wpdb->options} WHERE option_name LIKE %s OR option_name LIKE %s",
		$wpdb->esc_like( '_transient_sbx_notice_' ) . '%',
		$wpdb->esc_like( '_transient_timeout_sbx_notice_' ) . '%'
	)
);
