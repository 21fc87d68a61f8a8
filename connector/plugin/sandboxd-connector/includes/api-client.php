<?php
/**
 * A small JSON client for the service's API (wp_remote_request).
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * Calls the service. Never follows redirects (the bearer token must not
 * go to another host) and never logs the token.
 */
class Sbx_Api {

	/** @var string */
	private $base;
	/** @var string */
	private $token;

	/**
	 * @param string $base  Service base URL.
	 * @param string $token Bearer token ('' for the public OAuth routes).
	 */
	public function __construct( $base, $token = '' ) {
		$this->base  = rtrim( $base, '/' );
		$this->token = (string) $token;
	}

	/**
	 * One request. Returns array( 'status' => int (0 on a network error),
	 * 'data' => decoded JSON or null, 'code' => error code, 'message' =>
	 * error text, 'details' => error details ).
	 *
	 * @param string $method HTTP method.
	 * @param string $path   Path from the base, starting with '/'.
	 * @param array  $opts   json (array), form (array) or body (string); headers; timeout.
	 * @return array
	 */
	public function request( $method, $path, array $opts = array() ) {
		$headers = isset( $opts['headers'] ) ? $opts['headers'] : array();
		$body    = null;
		if ( isset( $opts['json'] ) ) {
			$headers['Content-Type'] = 'application/json';
			$body                    = wp_json_encode( $opts['json'] );
		} elseif ( isset( $opts['form'] ) ) {
			$headers['Content-Type'] = 'application/x-www-form-urlencoded';
			$body                    = http_build_query( $opts['form'], '', '&', PHP_QUERY_RFC3986 );
		} elseif ( isset( $opts['body'] ) ) {
			$body = $opts['body'];
		}
		$headers['Accept'] = 'application/json';
		if ( '' !== $this->token ) {
			$headers['Authorization'] = 'Bearer ' . $this->token;
		}
		$args = array(
			'method'      => $method,
			'headers'     => $headers,
			'timeout'     => isset( $opts['timeout'] ) ? (int) $opts['timeout'] : 30,
			'redirection' => 0,
			'user-agent'  => 'SandboxdConnector/' . SBX_VERSION . '; ' . home_url( '/' ),
		);
		if ( null !== $body ) {
			$args['body'] = $body;
		}
		$res = wp_remote_request( $this->base . $path, $args );
		unset( $args, $body );
		if ( is_wp_error( $res ) ) {
			return array(
				'status'  => 0,
				'data'    => null,
				'code'    => 'network_error',
				'message' => $res->get_error_message(),
				'details' => array(),
			);
		}
		$status = (int) wp_remote_retrieve_response_code( $res );
		$data   = json_decode( wp_remote_retrieve_body( $res ), true );
		$out    = array(
			'status'  => $status,
			'data'    => is_array( $data ) ? $data : null,
			'code'    => '',
			'message' => '',
			'details' => array(),
		);
		if ( $status >= 400 || $status < 200 ) {
			$err = is_array( $data ) && isset( $data['error'] ) ? $data['error'] : null;
			if ( is_array( $err ) ) {
				$out['code']    = isset( $err['code'] ) ? (string) $err['code'] : '';
				$out['message'] = isset( $err['message'] ) ? (string) $err['message'] : '';
				$out['details'] = isset( $err['details'] ) && is_array( $err['details'] ) ? $err['details'] : array();
			} elseif ( is_string( $err ) ) {
				$out['code']    = $err;
				$out['message'] = isset( $data['error_description'] ) ? (string) $data['error_description'] : $err;
			}
			if ( '' === $out['message'] ) {
				/* translators: %d: HTTP status code. */
				$out['message'] = sprintf( __( 'The service answered HTTP %d.', 'sandboxd-connector' ), $status );
			}
			if ( 401 === $status && '' !== $this->token ) {
				Sbx_OAuth::mark_expired();
			}
		}
		return $out;
	}
}
