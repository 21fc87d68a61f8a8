<?php
/**
 * Which files under wp-content go into the archive. Pure PHP.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) && ! defined( 'SBX_PURE' ) ) {
	exit;
}

/**
 * Exclusion rules, matched against paths relative to wp-content
 * ('/'-separated, no leading slash).
 */
class Sbx_File_Rules {

	/** Files larger than this (4 GiB) are left out with a note. */
	const MAX_FILE_BYTES = 4294967296;

	/**
	 * Caches, upgrade leftovers, security-plugin logs and other backup
	 * plugins' archives (fnmatch patterns, '*' stays within one segment).
	 *
	 * @var string[]
	 */
	public static $default_patterns = array(
		'cache',
		'upgrade',
		'upgrade-temp-backup',
		'wflogs',
		'et-cache',
		'updraft',
		'ai1wm-backups',
		'backups-dup-lite',
		'backups-dup-pro',
		'backup-db',
		'backupwordpress-*',
		'wpvividbackups',
		'aiowps_backups',
		'wp-snapshots',
		'uploads/backwpup*',
		'uploads/backupbuddy_backups',
		'uploads/pb_backupbuddy',
		'uploads/wp-clone',
		'uploads/wp-migrate-db',
		'uploads/sandboxd-connector',
		'plugins/all-in-one-wp-migration/storage',
		'debug.log',
	);

	/** @var string[] */
	private $patterns;
	/** @var array<string,bool> */
	private $exact = array();

	/**
	 * @param string[] $extra_patterns More fnmatch patterns.
	 * @param string[] $exact_paths    Exact relative paths to leave out (the work directory).
	 */
	public function __construct( array $extra_patterns = array(), array $exact_paths = array() ) {
		$this->patterns = array_values( array_unique( array_merge( self::$default_patterns, $extra_patterns ) ) );
		foreach ( $exact_paths as $p ) {
			$p = trim( str_replace( '\\', '/', $p ), '/' );
			if ( '' !== $p ) {
				$this->exact[ $p ] = true;
			}
		}
	}

	/**
	 * Whether a path (and, for a directory, everything below it) is left out.
	 *
	 * @param string $rel Path relative to wp-content.
	 * @return bool
	 */
	public function excluded( $rel ) {
		$rel = trim( $rel, '/' );
		if ( isset( $this->exact[ $rel ] ) ) {
			return true;
		}
		foreach ( $this->patterns as $p ) {
			if ( fnmatch( $p, $rel, FNM_PATHNAME | FNM_PERIOD ) ) {
				return true;
			}
		}
		return false;
	}
}
