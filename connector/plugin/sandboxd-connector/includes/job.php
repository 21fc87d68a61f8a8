<?php
/**
 * The copy job: a state machine run as short admin-ajax steps, its state
 * in an option (not autoloaded), its files in a private work directory.
 *
 * Phases: list → dump → archive → create → upload → complete →
 * restoring → ready (or failed / cancelled).
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * Start, step, cancel and describe the copy.
 */
class Sbx_Job {

	const OPT      = 'sbx_job';
	const LOCK     = 'sbx_lock';
	const LOCK_TTL = 120;

	/**
	 * Seconds of work per step (filter 'sbx_step_seconds', 1 to 20).
	 *
	 * @return float
	 */
	public static function step_seconds() {
		return (float) max( 1, min( 20, (int) apply_filters( 'sbx_step_seconds', 5 ) ) );
	}

	/**
	 * The saved state, read from the database (not a stale cache).
	 *
	 * @return array|null
	 */
	public static function load() {
		wp_cache_delete( self::OPT, 'options' );
		$st = get_option( self::OPT );
		return is_array( $st ) && isset( $st['phase'] ) ? $st : null;
	}

	/**
	 * Save the state.
	 *
	 * @param array $st State.
	 */
	private static function save( array $st ) {
		update_option( self::OPT, $st, false );
	}

	/**
	 * Whether a phase is before the restore started (our side works).
	 *
	 * @param string $phase Phase.
	 * @return bool
	 */
	private static function is_local( $phase ) {
		return in_array( $phase, array( 'list', 'dump', 'archive', 'create', 'upload', 'complete' ), true );
	}

	/**
	 * Start a new copy (replacing a finished one).
	 *
	 * @return array The view.
	 * @throws Sbx_Fatal When one is running or nothing can be written.
	 */
	public static function start() {
		$old = self::load();
		if ( $old && ( self::is_local( $old['phase'] ) || 'restoring' === $old['phase'] ) ) {
			throw new Sbx_Fatal( __( 'A copy is already in progress. Cancel it first.', 'sandboxd-connector' ) );
		}
		if ( $old ) {
			self::remove_work( $old );
		}
		$work = self::make_work_dir();
		$rel  = self::rel_to_content( $work );
		$st   = array(
			'id'        => bin2hex( random_bytes( 8 ) ),
			'phase'     => 'list',
			'work'      => $work,
			'started'   => time(),
			'paused'    => false,
			'error'     => '',
			'import_id' => '',
			'offset'    => 0,
			'size'      => 0,
			'site_url'  => '',
			'remote'    => null,
			'exclude'   => '' === $rel ? array() : array( $rel ),
		);
		$st['list'] = Sbx_File_Exporter::list_init(
			$work,
			WP_CONTENT_DIR,
			'wp-content',
			array(
				array( 'database.sql', $work . '/database.sql' ),
				array( 'wp-config.php', $work . '/wp-config.php' ),
			)
		);
		self::save( $st );
		return self::view( $st );
	}

	/**
	 * Do one step of work (at most step_seconds, a chunk upload may take
	 * longer). With $resume a paused job continues.
	 *
	 * @param bool $resume Whether the admin pressed Resume.
	 * @return array The view.
	 */
	public static function step( $resume = false ) {
		$st = self::load();
		if ( ! $st ) {
			return self::view( null );
		}
		if ( $st['paused'] && ! $resume ) {
			return self::view( $st );
		}
		if ( ! self::is_local( $st['phase'] ) && 'restoring' !== $st['phase'] ) {
			return self::view( $st );
		}
		if ( ! self::lock() ) {
			$v          = self::view( $st );
			$v['busy'] = true;
			return $v;
		}
		$st['paused'] = false;
		$st['error']  = '';
		$deadline     = microtime( true ) + self::step_seconds();
		try {
			self::advance( $st, $deadline );
		} catch ( Sbx_Fatal $e ) {
			$st['phase'] = 'failed';
			$st['error'] = $e->getMessage();
			self::remove_work( $st );
		} catch ( Exception $e ) {
			$st['paused'] = true;
			$st['error']  = $e->getMessage();
		} catch ( Error $e ) {
			// A PHP error: logged with its place (never with request data).
			error_log( 'Sandboxd Connector: ' . $e->getMessage() . ' at ' . basename( $e->getFile() ) . ':' . $e->getLine() );
			$st['paused'] = true;
			$st['error']  = __( 'An internal error stopped the copy; press Resume to retry.', 'sandboxd-connector' );
		}
		$now = self::load();
		if ( $now && $now['id'] === $st['id'] && 'cancelled' !== $now['phase'] ) {
			self::save( $st );
		} else {
			$st = $now; // Cancelled meanwhile: keep that.
		}
		self::unlock();
		return self::view( $st );
	}

	/**
	 * Run the current phase until the deadline, moving on as phases end.
	 *
	 * @param array $st       State.
	 * @param float $deadline microtime(true).
	 * @throws Exception On failure.
	 */
	private static function advance( array &$st, $deadline ) {
		$work = $st['work'];
		if ( self::is_local( $st['phase'] ) && in_array( $st['phase'], array( 'list', 'dump', 'archive' ), true ) && ! is_dir( $work ) ) {
			throw new Sbx_Fatal( __( 'The temporary files are gone; start a new copy.', 'sandboxd-connector' ) );
		}
		while ( microtime( true ) < $deadline ) {
			switch ( $st['phase'] ) {
				case 'list':
					$rules = new Sbx_File_Rules( (array) apply_filters( 'sbx_exclude_patterns', array() ), $st['exclude'] );
					if ( Sbx_File_Exporter::list_step( $st['list'], $work, $rules, $deadline ) ) {
						$st['db']    = Sbx_Db_Exporter::init( $work . '/database.sql', $work . '/wp-config.php' );
						$st['phase'] = 'dump';
					}
					break;
				case 'dump':
					if ( Sbx_Db_Exporter::step( $st['db'], $work . '/database.sql', $deadline ) ) {
						$st['archive'] = Sbx_File_Exporter::archive_init( true );
						$st['phase']   = 'archive';
					}
					break;
				case 'archive':
					if ( Sbx_File_Exporter::archive_step( $st['archive'], $work, self::archive_path( $st ), $deadline ) ) {
						$st['size']  = (int) $st['archive']['size'];
						$st['phase'] = 'create';
						// The listing and the dump are in the archive now.
						@unlink( $work . '/database.sql' );
						@unlink( $work . '/queue.txt' );
					}
					break;
				case 'create':
					$st['import_id'] = Sbx_Uploader::create( $st['size'] );
					$st['offset']    = 0;
					$st['phase']     = 'upload';
					break;
				case 'upload':
					$st['offset'] = Sbx_Uploader::upload( $st['import_id'], self::archive_path( $st ), $st['size'], $st['offset'], $deadline );
					if ( $st['offset'] >= $st['size'] ) {
						$st['phase'] = 'complete';
					}
					break;
				case 'complete':
					Sbx_Uploader::complete( $st['import_id'] );
					$st['phase'] = 'restoring';
					self::remove_work( $st );
					return;
				case 'restoring':
					self::poll( $st );
					return;
				default:
					return;
			}
		}
	}

	/**
	 * Read the import's status from the service.
	 *
	 * @param array $st State.
	 * @throws Exception On failure.
	 */
	private static function poll( array &$st ) {
		$d   = Sbx_Uploader::get( $st['import_id'] );
		$imp = $d['import'];
		$p   = isset( $d['progress'] ) && is_array( $d['progress'] ) ? $d['progress'] : array();
		$st['remote'] = array(
			'status'  => isset( $imp['status'] ) ? (string) $imp['status'] : '',
			'phase'   => isset( $p['phase'] ) ? (string) $p['phase'] : '',
			'percent' => isset( $p['percent'] ) ? (int) $p['percent'] : 0,
		);
		switch ( $st['remote']['status'] ) {
			case 'ready':
				$st['phase']    = 'ready';
				$st['site_url'] = isset( $d['siteUrl'] ) && is_string( $d['siteUrl'] ) ? esc_url_raw( $d['siteUrl'] ) : '';
				break;
			case 'failed':
			case 'cancelled':
			case 'site_deleted':
				$st['phase'] = 'failed';
				$reason      = isset( $imp['failureReason'] ) ? (string) $imp['failureReason'] : '';
				/* translators: 1: import status, 2: reason given by the service. */
				$st['error'] = sprintf( __( 'The service reports the import as %1$s. %2$s', 'sandboxd-connector' ), $st['remote']['status'], $reason );
				break;
		}
	}

	/**
	 * A one-time wp-admin login URL for the ready sandbox.
	 *
	 * @return string
	 * @throws Exception When there is none.
	 */
	public static function login_url() {
		$st = self::load();
		if ( ! $st || 'ready' !== $st['phase'] ) {
			throw new Sbx_Fatal( __( 'There is no ready sandbox.', 'sandboxd-connector' ) );
		}
		$d   = Sbx_Uploader::get( $st['import_id'] );
		$url = isset( $d['loginUrl'] ) && is_string( $d['loginUrl'] ) ? $d['loginUrl'] : '';
		if ( ! preg_match( '#^https?://#i', $url ) ) {
			throw new Sbx_Fatal( __( 'The service gave no login link.', 'sandboxd-connector' ) );
		}
		return $url;
	}

	/**
	 * Cancel: tell the service (if an import exists) and remove the files.
	 *
	 * @return array The view.
	 */
	public static function cancel() {
		$st = self::load();
		if ( ! $st ) {
			return self::view( null );
		}
		for ( $i = 0; $i < 40 && ! self::lock(); $i++ ) {
			usleep( 250000 );
		}
		$st = self::load();
		if ( $st && ( self::is_local( $st['phase'] ) || 'restoring' === $st['phase'] ) ) {
			if ( '' !== $st['import_id'] ) {
				Sbx_Uploader::cancel( $st['import_id'] );
			}
			self::remove_work( $st );
			$st['phase']  = 'cancelled';
			$st['paused'] = false;
			$st['error']  = '';
			self::save( $st );
		}
		self::unlock();
		return self::view( $st );
	}

	/**
	 * The archive's path.
	 *
	 * @param array $st State.
	 * @return string
	 */
	private static function archive_path( array $st ) {
		return $st['work'] . '/site.tar' . ( ! empty( $st['archive']['compress'] ) ? '.gz' : '' );
	}

	/**
	 * What the page shows, for the JS and the first render. Holds no secret.
	 *
	 * @param array|null $st State.
	 * @return array
	 */
	public static function view( $st ) {
		$v = array(
			'state'     => 'idle',
			'phase'     => $st ? $st['phase'] : '',
			'label'     => '',
			'percent'   => 0,
			'active'    => false,
			'paused'    => false,
			'error'     => '',
			'siteUrl'   => '',
			'notes'     => array(),
			'connected' => (bool) Sbx_OAuth::connection(),
		);
		if ( ! $st ) {
			return $v;
		}
		$v['paused'] = ! empty( $st['paused'] );
		$v['error']  = (string) $st['error'];
		switch ( $st['phase'] ) {
			case 'list':
				$v['state'] = 'exporting';
				/* translators: %s: number of files. */
				$v['label']   = sprintf( __( 'Listing files — %s found', 'sandboxd-connector' ), number_format_i18n( $st['list']['files'] ) );
				$v['percent'] = 2;
				break;
			case 'dump':
				$n          = count( $st['db']['tables'] );
				$t          = min( $n, $st['db']['t'] + 1 );
				$v['state'] = 'exporting';
				/* translators: 1: current table number, 2: number of tables. */
				$v['label']   = sprintf( __( 'Exporting database — table %1$s/%2$s', 'sandboxd-connector' ), number_format_i18n( $t ), number_format_i18n( $n ) );
				$v['percent'] = $n ? (int) floor( 100 * $st['db']['t'] / $n ) : 0;
				break;
			case 'archive':
				$total      = max( 1, (int) $st['list']['entries'] );
				$v['state'] = 'exporting';
				/* translators: 1: entries archived, 2: total entries. */
				$v['label']   = sprintf( __( 'Archiving files — %1$s/%2$s', 'sandboxd-connector' ), number_format_i18n( min( $total, $st['archive']['index'] ) ), number_format_i18n( $total ) );
				$v['percent'] = (int) floor( 100 * min( $total, $st['archive']['index'] ) / $total );
				break;
			case 'create':
			case 'upload':
			case 'complete':
				$v['state'] = 'uploading';
				/* translators: 1: megabytes uploaded, 2: total megabytes. */
				$v['label']   = sprintf( __( 'Uploading — %1$s of %2$s MB', 'sandboxd-connector' ), number_format_i18n( $st['offset'] / 1048576, 1 ), number_format_i18n( $st['size'] / 1048576, 1 ) );
				$v['percent'] = $st['size'] ? (int) floor( 100 * $st['offset'] / $st['size'] ) : 0;
				break;
			case 'restoring':
				$r          = is_array( $st['remote'] ) ? $st['remote'] : array( 'phase' => '', 'percent' => 0 );
				$v['state'] = 'restoring';
				/* translators: 1: restore phase, 2: percent. */
				$v['label']   = preg_replace( '/\s+/u', ' ', sprintf( __( 'Restoring on the service — %1$s %2$s%%', 'sandboxd-connector' ), $r['phase'], (int) $r['percent'] ) );
				$v['percent'] = (int) $r['percent'];
				break;
			case 'ready':
				$v['state']   = 'ready';
				$v['label']   = __( 'Ready', 'sandboxd-connector' );
				$v['percent'] = 100;
				$v['siteUrl'] = (string) $st['site_url'];
				break;
			case 'failed':
				$v['state'] = 'failed';
				$v['label'] = __( 'Failed', 'sandboxd-connector' );
				break;
			case 'cancelled':
				$v['label'] = __( 'Cancelled', 'sandboxd-connector' );
				break;
		}
		$v['active'] = self::is_local( $st['phase'] ) || 'restoring' === $st['phase'];
		$v['percent'] = max( 0, min( 100, $v['percent'] ) );
		$notes        = array_merge(
			isset( $st['list']['notes'] ) ? $st['list']['notes'] : array(),
			isset( $st['db']['notes'] ) ? $st['db']['notes'] : array(),
			isset( $st['archive']['notes'] ) ? $st['archive']['notes'] : array()
		);
		$v['notes']   = array_slice( $notes, 0, 20 );
		return $v;
	}

	/**
	 * Take the step lock (an options row inserted atomically).
	 *
	 * @return bool
	 */
	private static function lock() {
		global $wpdb;
		$wpdb->query( $wpdb->prepare( "DELETE FROM {$wpdb->options} WHERE option_name = %s AND option_value < %d", self::LOCK, time() ) );
		$ok = $wpdb->query( $wpdb->prepare( "INSERT IGNORE INTO {$wpdb->options} (option_name, option_value, autoload) VALUES (%s, %s, 'no')", self::LOCK, (string) ( time() + self::LOCK_TTL ) ) );
		wp_cache_delete( self::LOCK, 'options' );
		return 1 === (int) $ok;
	}

	/**
	 * Release the step lock.
	 */
	private static function unlock() {
		global $wpdb;
		$wpdb->delete( $wpdb->options, array( 'option_name' => self::LOCK ) );
		wp_cache_delete( self::LOCK, 'options' );
	}

	/**
	 * Make the private work directory: a random 32-hex name under the
	 * temp directory when it is writable and outside the web root, else
	 * under uploads/sandboxd-connector/ with deny rules.
	 *
	 * @return string
	 * @throws Sbx_Fatal When neither works.
	 */
	public static function make_work_dir() {
		$name = bin2hex( random_bytes( 16 ) );
		$tmp  = untrailingslashit( get_temp_dir() );
		$real = realpath( $tmp );
		$root = realpath( ABSPATH );
		if ( $real && is_writable( $real ) && ( ! $root || 0 !== strpos( $real . '/', rtrim( $root, '/' ) . '/' ) ) ) {
			$dir = $real . '/' . $name;
			if ( @mkdir( $dir, 0700 ) ) {
				clearstatcache();
				if ( 0 === ( fileperms( $dir ) & 0077 ) || '\\' === DIRECTORY_SEPARATOR ) {
					return $dir;
				}
				@rmdir( $dir );
			}
		}
		$up = wp_upload_dir( null, false );
		if ( empty( $up['basedir'] ) ) {
			throw new Sbx_Fatal( __( 'No writable place for temporary files was found.', 'sandboxd-connector' ) );
		}
		$parent = $up['basedir'] . '/sandboxd-connector';
		if ( ! is_dir( $parent ) && ! wp_mkdir_p( $parent ) ) {
			throw new Sbx_Fatal( __( 'No writable place for temporary files was found.', 'sandboxd-connector' ) );
		}
		self::protect( $parent );
		$dir = $parent . '/' . $name;
		if ( ! @mkdir( $dir, 0700 ) ) {
			throw new Sbx_Fatal( __( 'No writable place for temporary files was found.', 'sandboxd-connector' ) );
		}
		self::protect( $dir );
		return $dir;
	}

	/**
	 * Deny web access to a directory (Apache) and hide its listing.
	 *
	 * @param string $dir Directory.
	 */
	private static function protect( $dir ) {
		if ( ! file_exists( $dir . '/.htaccess' ) ) {
			@file_put_contents( $dir . '/.htaccess', "<IfModule mod_authz_core.c>\nRequire all denied\n</IfModule>\n<IfModule !mod_authz_core.c>\nDeny from all\n</IfModule>\n" );
		}
		if ( ! file_exists( $dir . '/index.php' ) ) {
			@file_put_contents( $dir . '/index.php', "<?php\n// Silence is golden.\n" );
		}
	}

	/**
	 * A path relative to wp-content ('' when outside it).
	 *
	 * @param string $path Absolute path.
	 * @return string
	 */
	private static function rel_to_content( $path ) {
		$c = realpath( WP_CONTENT_DIR );
		$p = realpath( $path );
		if ( $c && $p && 0 === strpos( $p, rtrim( $c, '/' ) . '/' ) ) {
			return substr( $p, strlen( rtrim( $c, '/' ) ) + 1 );
		}
		return '';
	}

	/**
	 * Delete the job's work directory.
	 *
	 * @param array $st State.
	 */
	public static function remove_work( array $st ) {
		if ( ! empty( $st['work'] ) && preg_match( '#/(sbx-)?[0-9a-f]{32}$#', $st['work'] ) ) {
			self::rrmdir( $st['work'] );
		}
	}

	/**
	 * Remove a tree without following symlinks.
	 *
	 * @param string $dir Directory.
	 */
	public static function rrmdir( $dir ) {
		if ( is_link( $dir ) || ! is_dir( $dir ) ) {
			if ( file_exists( $dir ) || is_link( $dir ) ) {
				@unlink( $dir );
			}
			return;
		}
		$items = @scandir( $dir );
		foreach ( (array) $items as $i ) {
			if ( '.' !== $i && '..' !== $i ) {
				self::rrmdir( $dir . '/' . $i );
			}
		}
		@rmdir( $dir );
	}
}
