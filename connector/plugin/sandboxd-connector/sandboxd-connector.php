<?php
/**
 * Plugin Name:       Sandboxd Connector
 * Description:       Copy this site (database and wp-content) into a disposable sandbox on your Sandboxd service. Connects with OAuth; no shell access or server credentials needed.
 * Version:           1.0.0
 * Requires at least: 5.7
 * Requires PHP:      7.4
 * License:           GPLv2 or later
 * License URI:       https://www.gnu.org/licenses/gpl-2.0.html
 * Text Domain:       sandboxd-connector
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

define( 'SBX_VERSION', '1.0.0' );
define( 'SBX_DIR', plugin_dir_path( __FILE__ ) );
define( 'SBX_URL', plugin_dir_url( __FILE__ ) );

require_once SBX_DIR . 'includes/pkce.php';
require_once SBX_DIR . 'includes/url-rules.php';
require_once SBX_DIR . 'includes/sql-writer.php';
require_once SBX_DIR . 'includes/tar-writer.php';
require_once SBX_DIR . 'includes/file-rules.php';
require_once SBX_DIR . 'includes/exporter-files.php';

if ( is_admin() ) {
	require_once SBX_DIR . 'includes/api-client.php';
	require_once SBX_DIR . 'includes/oauth.php';
	require_once SBX_DIR . 'includes/exporter-db.php';
	require_once SBX_DIR . 'includes/uploader.php';
	require_once SBX_DIR . 'includes/job.php';
	require_once SBX_DIR . 'includes/admin-page.php';
	Sbx_Admin::init();
	add_action(
		'plugins_loaded',
		function () {
			load_plugin_textdomain( 'sandboxd-connector', false, dirname( plugin_basename( __FILE__ ) ) . '/languages' );
		}
	);
	add_filter(
		'plugin_action_links_' . plugin_basename( __FILE__ ),
		function ( $links ) {
			array_unshift( $links, '<a href="' . esc_url( Sbx_Admin::url() ) . '">' . esc_html__( 'Sandbox copy', 'sandboxd-connector' ) . '</a>' );
			return $links;
		}
	);
}

/**
 * Deactivation: cancel nothing remotely, but remove local temp files.
 */
register_deactivation_hook(
	__FILE__,
	function () {
		if ( class_exists( 'Sbx_Job' ) ) {
			$st = Sbx_Job::load();
			if ( $st ) {
				Sbx_Job::remove_work( $st );
			}
		}
	}
);
