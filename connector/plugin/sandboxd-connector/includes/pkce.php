<?php
/**
 * PKCE (RFC 7636) and OAuth helpers. Pure PHP: no WordPress calls, so the
 * tests can load this file on its own.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) && ! defined( 'SBX_PURE' ) ) {
	exit;
}

/**
 * Verifier, challenge and state values, and the authorize URL.
 */
class Sbx_Pkce {

	/**
	 * Base64url without padding (RFC 4648 section 5).
	 *
	 * @param string $bin Raw bytes.
	 * @return string
	 */
	public static function b64url( $bin ) {
		return rtrim( strtr( base64_encode( $bin ), '+/', '-_' ), '=' );
	}

	/**
	 * A code verifier: 32 random bytes, base64url (43 characters).
	 *
	 * @return string
	 */
	public static function verifier() {
		return self::b64url( random_bytes( 32 ) );
	}

	/**
	 * The S256 challenge of a verifier.
	 *
	 * @param string $verifier The code verifier.
	 * @return string
	 */
	public static function challenge( $verifier ) {
		return self::b64url( hash( 'sha256', $verifier, true ) );
	}

	/**
	 * An OAuth state value: 32 random bytes, base64url.
	 *
	 * @return string
	 */
	public static function state() {
		return self::b64url( random_bytes( 32 ) );
	}

	/**
	 * The service's authorize URL for this request.
	 *
	 * @param string $base         Service base URL, without a trailing slash.
	 * @param string $client_id    Registered client id.
	 * @param string $redirect_uri Exact redirect URI.
	 * @param string $state        State value.
	 * @param string $challenge    PKCE challenge.
	 * @return string
	 */
	public static function authorize_url( $base, $client_id, $redirect_uri, $state, $challenge ) {
		$q = array(
			'response_type'         => 'code',
			'client_id'             => $client_id,
			'redirect_uri'          => $redirect_uri,
			'scope'                 => 'import:read import:write',
			'state'                 => $state,
			'code_challenge'        => $challenge,
			'code_challenge_method' => 'S256',
		);
		return $base . '/connect/authorize?' . http_build_query( $q, '', '&', PHP_QUERY_RFC3986 );
	}
}
