<?php
/**
 * The OAuth connection to the service: client registration, PKCE
 * authorization and the code exchange. The token is kept in an option
 * that is not autoloaded and is never printed.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * Connect, callback, disconnect.
 */
class Sbx_OAuth {

	const OPT_BASE   = 'sbx_service_url';
	const OPT_CLIENT = 'sbx_client';
	const OPT_TOKEN  = 'sbx_token';
	const META_FLOW  = '_sbx_oauth';
	const FLOW_TTL   = 600;

	/**
	 * The redirect URI: exactly the same in register, authorize and token.
	 *
	 * @return string
	 */
	public static function redirect_uri() {
		return admin_url( 'admin.php?page=sandboxd-connector&sbx=callback' );
	}

	/**
	 * The saved service base URL ('' when none).
	 *
	 * @return string
	 */
	public static function base() {
		return (string) get_option( self::OPT_BASE, '' );
	}

	/**
	 * The saved token record, or null when not connected.
	 *
	 * @return array|null
	 */
	public static function connection() {
		$t = get_option( self::OPT_TOKEN );
		if ( ! is_array( $t ) || empty( $t['access_token'] ) || empty( $t['base'] ) || $t['base'] !== self::base() ) {
			return null;
		}
		if ( ! empty( $t['expires_at'] ) && $t['expires_at'] <= time() ) {
			return null;
		}
		return $t;
	}

	/**
	 * The account the last token belonged to (for "Reconnect" texts).
	 *
	 * @return string
	 */
	public static function last_account() {
		$t = get_option( self::OPT_TOKEN );
		return is_array( $t ) && isset( $t['account_email'] ) ? (string) $t['account_email'] : '';
	}

	/**
	 * An API client with the token, or null when not connected.
	 *
	 * @return Sbx_Api|null
	 */
	public static function api() {
		$c = self::connection();
		return $c ? new Sbx_Api( $c['base'], $c['access_token'] ) : null;
	}

	/**
	 * Forget the token after a 401: the admin page then offers Reconnect.
	 */
	public static function mark_expired() {
		$t = get_option( self::OPT_TOKEN );
		if ( is_array( $t ) ) {
			$t['access_token'] = '';
			update_option( self::OPT_TOKEN, $t, false );
		}
	}

	/**
	 * Save the service URL; a different service drops the token and client.
	 *
	 * @param string $base Normalised base URL.
	 */
	public static function set_base( $base ) {
		if ( $base !== self::base() ) {
			delete_option( self::OPT_TOKEN );
			delete_option( self::OPT_CLIENT );
		}
		update_option( self::OPT_BASE, $base, false );
	}

	/**
	 * Delete the token and the client id.
	 */
	public static function disconnect() {
		delete_option( self::OPT_TOKEN );
		delete_option( self::OPT_CLIENT );
	}

	/**
	 * The client id for this base URL and redirect URI, registering one
	 * (RFC 7591, public client) when there is none, they changed, or the
	 * service may have removed it: it removes a client that got no token
	 * within a day, or had none alive for 30 days.
	 *
	 * @return string|WP_Error
	 */
	public static function client_id() {
		$base     = self::base();
		$redirect = self::redirect_uri();
		$c        = get_option( self::OPT_CLIENT );
		if ( is_array( $c ) && ! empty( $c['client_id'] ) && $c['base'] === $base && $c['redirect_uri'] === $redirect ) {
			$registered = isset( $c['registered_at'] ) ? (int) $c['registered_at'] : 0;
			$token_at   = isset( $c['token_at'] ) ? (int) $c['token_at'] : 0;
			if ( $registered > time() - 20 * HOUR_IN_SECONDS || $token_at > time() - 29 * DAY_IN_SECONDS ) {
				return $c['client_id'];
			}
		}
		$api = new Sbx_Api( $base );
		$r   = $api->request(
			'POST',
			'/api/connect/register',
			array(
				'json' => array(
					'client_name'                => 'Sandboxd Connector on ' . wp_specialchars_decode( get_bloginfo( 'name' ), ENT_QUOTES ),
					'redirect_uris'              => array( $redirect ),
					'token_endpoint_auth_method' => 'none',
					'grant_types'                => array( 'authorization_code' ),
					'response_types'             => array( 'code' ),
					'scope'                      => 'import:read import:write',
					'software_id'                => 'sandboxd-connector',
					'software_version'           => SBX_VERSION,
					'client_uri'                 => home_url(),
				),
			)
		);
		if ( 201 !== $r['status'] && 200 !== $r['status'] ) {
			return new WP_Error( 'sbx_register', self::failure( __( 'Registering with the service failed', 'sandboxd-connector' ), $r ) );
		}
		if ( empty( $r['data']['client_id'] ) || ! is_string( $r['data']['client_id'] ) ) {
			return new WP_Error( 'sbx_register', __( 'The service did not return a client id.', 'sandboxd-connector' ) );
		}
		update_option(
			self::OPT_CLIENT,
			array(
				'client_id'     => $r['data']['client_id'],
				'base'          => $base,
				'redirect_uri'  => $redirect,
				'registered_at' => time(),
			),
			false
		);
		return $r['data']['client_id'];
	}

	/**
	 * Start the flow for the current user: the authorize URL to send the
	 * browser to. Verifier and state stay on the server (user meta, 10
	 * minutes, single use).
	 *
	 * @return string|WP_Error
	 */
	public static function begin() {
		$client = self::client_id();
		if ( is_wp_error( $client ) ) {
			return $client;
		}
		$verifier = Sbx_Pkce::verifier();
		$state    = Sbx_Pkce::state();
		update_user_meta(
			get_current_user_id(),
			self::META_FLOW,
			array(
				'state'        => $state,
				'verifier'     => $verifier,
				'client_id'    => $client,
				'redirect_uri' => self::redirect_uri(),
				'base'         => self::base(),
				'expires'      => time() + self::FLOW_TTL,
			)
		);
		return Sbx_Pkce::authorize_url( self::base(), $client, self::redirect_uri(), $state, Sbx_Pkce::challenge( $verifier ) );
	}

	/**
	 * Handle the redirect back: check state, exchange the code. Returns
	 * true or a WP_Error whose message can be shown.
	 *
	 * @param array $q The query ($_GET, unslashed).
	 * @return true|WP_Error
	 */
	public static function callback( array $q ) {
		$uid  = get_current_user_id();
		$flow = get_user_meta( $uid, self::META_FLOW, true );
		$got  = isset( $q['state'] ) && is_string( $q['state'] ) ? $q['state'] : '';
		if ( ! is_array( $flow ) || empty( $flow['state'] ) || '' === $got || ! hash_equals( $flow['state'], $got ) ) {
			return new WP_Error( 'sbx_state', __( 'The connection request was not recognised or has expired. Please connect again.', 'sandboxd-connector' ) );
		}
		delete_user_meta( $uid, self::META_FLOW ); // Single use.
		if ( $flow['expires'] < time() || $flow['base'] !== self::base() ) {
			return new WP_Error( 'sbx_state', __( 'The connection request has expired. Please connect again.', 'sandboxd-connector' ) );
		}
		if ( isset( $q['error'] ) ) {
			if ( 'access_denied' === $q['error'] ) {
				return new WP_Error( 'sbx_denied', __( 'The connection was declined on the service.', 'sandboxd-connector' ) );
			}
			/* translators: %s: OAuth error code. */
			return new WP_Error( 'sbx_denied', sprintf( __( 'The service did not authorize the connection (%s).', 'sandboxd-connector' ), sanitize_key( $q['error'] ) ) );
		}
		$code = isset( $q['code'] ) && is_string( $q['code'] ) ? $q['code'] : '';
		if ( '' === $code ) {
			return new WP_Error( 'sbx_code', __( 'The service sent no authorization code.', 'sandboxd-connector' ) );
		}
		$api = new Sbx_Api( $flow['base'] );
		$r   = $api->request(
			'POST',
			'/api/connect/token',
			array(
				'form' => array(
					'grant_type'    => 'authorization_code',
					'code'          => $code,
					'client_id'     => $flow['client_id'],
					'redirect_uri'  => $flow['redirect_uri'],
					'code_verifier' => $flow['verifier'],
				),
			)
		);
		if ( 200 !== $r['status'] || empty( $r['data']['access_token'] ) ) {
			if ( in_array( $r['code'], array( 'invalid_client', 'unauthorized_client' ), true ) ) {
				delete_option( self::OPT_CLIENT );
			}
			return new WP_Error( 'sbx_token', self::failure( __( 'Getting an access token failed', 'sandboxd-connector' ), $r ) );
		}
		$d       = $r['data'];
		$expires = isset( $d['expires_in'] ) ? (int) $d['expires_in'] : 0;
		$client  = get_option( self::OPT_CLIENT );
		if ( is_array( $client ) && isset( $client['client_id'] ) && $client['client_id'] === $flow['client_id'] ) {
			$client['token_at'] = time(); // The service keeps a client with a live token.
			update_option( self::OPT_CLIENT, $client, false );
		}
		update_option(
			self::OPT_TOKEN,
			array(
				'access_token'  => (string) $d['access_token'],
				'expires_at'    => $expires > 0 ? time() + $expires : 0,
				'scope'         => isset( $d['scope'] ) ? (string) $d['scope'] : '',
				'account_email' => isset( $d['account_email'] ) ? (string) $d['account_email'] : '',
				'site_url'      => isset( $d['site_url'] ) ? (string) $d['site_url'] : '',
				'base'          => $flow['base'],
			),
			false
		);
		return true;
	}

	/**
	 * A message for a failed call (never includes secrets).
	 *
	 * @param string $what What failed.
	 * @param array  $r    Sbx_Api::request result.
	 * @return string
	 */
	public static function failure( $what, array $r ) {
		return $what . ': ' . ( '' !== $r['message'] ? $r['message'] : $r['code'] );
	}
}
