<?php
/**
 * Creates the import and uploads the archive in resumable chunks.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * Thrown for a failure the admin can retry with Resume.
 */
class Sbx_Pause extends RuntimeException {
}

/**
 * Thrown for a failure that ends the copy.
 */
class Sbx_Fatal extends RuntimeException {
}

/**
 * The import calls.
 */
class Sbx_Uploader {

	/** Default chunk size: 4 MiB (filter 'sbx_upload_chunk_bytes'). */
	const CHUNK_BYTES = 4194304;

	/** Attempts per chunk on network errors and 5xx answers. */
	const ATTEMPTS = 3;

	/**
	 * The chunk size in use (64 KiB to 64 MiB).
	 *
	 * @return int
	 */
	public static function chunk_bytes() {
		$n = (int) apply_filters( 'sbx_upload_chunk_bytes', self::CHUNK_BYTES );
		return max( 65536, min( 67108864, $n ) );
	}

	/**
	 * The API client or a pause asking to reconnect.
	 *
	 * @return Sbx_Api
	 * @throws Sbx_Pause When not connected.
	 */
	private static function api() {
		$api = Sbx_OAuth::api();
		if ( ! $api ) {
			throw new Sbx_Pause( __( 'The connection to the service has expired or was revoked. Reconnect, then press Resume.', 'sandboxd-connector' ) );
		}
		return $api;
	}

	/**
	 * Turn a failed answer into the right exception.
	 *
	 * @param string $what What failed.
	 * @param array  $r    Sbx_Api::request result.
	 * @throws Sbx_Pause|Sbx_Fatal Always.
	 */
	private static function fail( $what, array $r ) {
		$msg = Sbx_OAuth::failure( $what, $r );
		if ( 0 === $r['status'] || 401 === $r['status'] || 408 === $r['status'] || 429 === $r['status'] || $r['status'] >= 500 ) {
			if ( 401 === $r['status'] ) {
				$msg = __( 'The connection to the service has expired or was revoked. Reconnect, then press Resume.', 'sandboxd-connector' );
			}
			throw new Sbx_Pause( $msg );
		}
		throw new Sbx_Fatal( $msg );
	}

	/**
	 * POST /api/app/imports.
	 *
	 * @param int $size Archive size.
	 * @return string Import id.
	 * @throws Sbx_Pause|Sbx_Fatal On failure.
	 */
	public static function create( $size ) {
		$r = self::api()->request(
			'POST',
			'/api/app/imports',
			array(
				'json' => array(
					'sourceUrl'  => home_url(),
					'sizeBytes'  => (int) $size,
					'sourceKind' => 'remote_plugin',
				),
			)
		);
		if ( 201 !== $r['status'] && 200 !== $r['status'] ) {
			self::fail( __( 'Creating the import failed', 'sandboxd-connector' ), $r );
		}
		$id = isset( $r['data']['import']['id'] ) ? (string) $r['data']['import']['id'] : '';
		if ( ! preg_match( '/^[A-Za-z0-9_-]{1,100}$/', $id ) ) {
			throw new Sbx_Fatal( __( 'The service returned no import id.', 'sandboxd-connector' ) );
		}
		return $id;
	}

	/**
	 * Upload chunks until the deadline (at least one). Returns the new
	 * offset; the service's idea of the offset wins (409 offset_mismatch).
	 *
	 * @param string $id       Import id.
	 * @param string $archive  Archive path.
	 * @param int    $size     Archive size.
	 * @param int    $offset   Bytes the service has (as far as we know).
	 * @param float  $deadline microtime(true) to stop starting chunks at.
	 * @return int
	 * @throws Sbx_Pause|Sbx_Fatal On failure.
	 */
	public static function upload( $id, $archive, $size, $offset, $deadline ) {
		$api   = self::api();
		$chunk = self::chunk_bytes();
		$fh    = @fopen( $archive, 'rb' );
		if ( false === $fh ) {
			throw new Sbx_Fatal( __( 'The archive is missing; start a new copy.', 'sandboxd-connector' ) );
		}
		try {
			$mismatches = 0;
			do {
				if ( $offset >= $size ) {
					break;
				}
				fseek( $fh, $offset );
				$body = '';
				$want = (int) min( $chunk, $size - $offset );
				while ( strlen( $body ) < $want && ! feof( $fh ) ) {
					$part = fread( $fh, $want - strlen( $body ) );
					if ( false === $part || '' === $part ) {
						break;
					}
					$body .= $part;
				}
				if ( strlen( $body ) !== $want ) {
					throw new Sbx_Fatal( __( 'The archive is shorter than expected; start a new copy.', 'sandboxd-connector' ) );
				}
				$r = null;
				for ( $try = 1; $try <= self::ATTEMPTS; $try++ ) {
					$r = $api->request(
						'PUT',
						'/api/app/imports/' . rawurlencode( $id ) . '/upload',
						array(
							'headers' => array(
								'Content-Type'     => 'application/octet-stream',
								'x-service-offset' => (string) $offset,
							),
							'body'    => $body,
							'timeout' => 120,
						)
					);
					if ( 0 !== $r['status'] && $r['status'] < 500 ) {
						break;
					}
					if ( $try < self::ATTEMPTS ) {
						sleep( $try * 2 );
					}
				}
				unset( $body );
				if ( 200 === $r['status'] && isset( $r['data']['receivedBytes'] ) ) {
					$offset = (int) $r['data']['receivedBytes'];
				} elseif ( 409 === $r['status'] && 'offset_mismatch' === $r['code'] && isset( $r['details']['expectedOffset'] ) && ++$mismatches <= 3 ) {
					$offset = (int) $r['details']['expectedOffset'];
				} else {
					self::fail( __( 'Uploading failed', 'sandboxd-connector' ), $r );
				}
				if ( $offset > $size ) {
					throw new Sbx_Fatal( __( 'The service holds more bytes than the archive has.', 'sandboxd-connector' ) );
				}
			} while ( microtime( true ) < $deadline );
		} finally {
			fclose( $fh );
		}
		return $offset;
	}

	/**
	 * POST …/complete: seal the upload and start the restore.
	 *
	 * @param string $id Import id.
	 * @throws Sbx_Pause|Sbx_Fatal On failure.
	 */
	public static function complete( $id ) {
		$r = self::api()->request( 'POST', '/api/app/imports/' . rawurlencode( $id ) . '/complete', array( 'timeout' => 60 ) );
		if ( 202 !== $r['status'] && 200 !== $r['status'] ) {
			self::fail( __( 'Starting the restore failed', 'sandboxd-connector' ), $r );
		}
	}

	/**
	 * GET the import (status, progress, siteUrl, one-time loginUrl).
	 *
	 * @param string $id Import id.
	 * @return array
	 * @throws Sbx_Pause|Sbx_Fatal On failure.
	 */
	public static function get( $id ) {
		$r = self::api()->request( 'GET', '/api/app/imports/' . rawurlencode( $id ) );
		if ( 200 !== $r['status'] || ! isset( $r['data']['import'] ) ) {
			self::fail( __( 'Reading the import failed', 'sandboxd-connector' ), $r );
		}
		return $r['data'];
	}

	/**
	 * DELETE the import (cancel); errors are ignored.
	 *
	 * @param string $id Import id.
	 */
	public static function cancel( $id ) {
		$api = Sbx_OAuth::api();
		if ( $api ) {
			$api->request( 'DELETE', '/api/app/imports/' . rawurlencode( $id ) );
		}
	}
}
