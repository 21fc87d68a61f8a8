<?php
/**
 * Which service URLs the plugin talks to. Pure PHP.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) && ! defined( 'SBX_PURE' ) ) {
	exit;
}

/**
 * Service base URL checks: https, or http only on localhost-like hosts.
 */
class Sbx_Url_Rules {

	/**
	 * Whether a host is a loopback name or address.
	 *
	 * @param string $host Host as parse_url gives it (IPv6 in brackets).
	 * @return bool
	 */
	public static function is_local_host( $host ) {
		$host = strtolower( trim( $host, '[]' ) );
		if ( 'localhost' === $host || '::1' === $host ) {
			return true;
		}
		if ( strlen( $host ) > 10 && '.localhost' === substr( $host, -10 ) ) {
			return true;
		}
		return (bool) preg_match( '/^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/', $host );
	}

	/**
	 * The normalised base URL (scheme://host[:port][/path], no trailing
	 * slash), or '' when the URL is not acceptable.
	 *
	 * @param string $url As typed by the admin.
	 * @return string
	 */
	public static function normalize_base( $url ) {
		$url = trim( (string) $url );
		if ( '' === $url || strlen( $url ) > 2000 || preg_match( '/[\x00-\x20\x7f]/', $url ) ) {
			return '';
		}
		$p = parse_url( $url );
		if ( ! is_array( $p ) || empty( $p['scheme'] ) || empty( $p['host'] ) ) {
			return '';
		}
		if ( isset( $p['user'] ) || isset( $p['pass'] ) || isset( $p['query'] ) || isset( $p['fragment'] ) ) {
			return '';
		}
		$scheme = strtolower( $p['scheme'] );
		$host   = strtolower( $p['host'] );
		if ( 'https' !== $scheme && ! ( 'http' === $scheme && self::is_local_host( $host ) ) ) {
			return '';
		}
		if ( ! preg_match( '/^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)$/', $host ) ) {
			return '';
		}
		$out = $scheme . '://' . $host;
		if ( isset( $p['port'] ) ) {
			$out .= ':' . (int) $p['port'];
		}
		$path = isset( $p['path'] ) ? rtrim( $p['path'], '/' ) : '';
		if ( '' !== $path && ! preg_match( '#^(/[A-Za-z0-9._~%!$&\'()*+,;=:@-]+)+$#', $path ) ) {
			return '';
		}
		return $out . $path;
	}
}
