<?php
/**
 * Tar headers (ustar with PAX extensions) and a sink that writes one gzip
 * member per call sequence. Pure PHP.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) && ! defined( 'SBX_PURE' ) ) {
	exit;
}

/**
 * Builds tar header blocks.
 */
class Sbx_Tar {

	/** Largest size an ustar header's 11 octal digits hold. */
	const USTAR_MAX_SIZE = 8589934591;

	/**
	 * The header block(s) for one entry: a PAX extended header first when
	 * the name is longer than 100 bytes or the size does not fit ustar.
	 *
	 * @param string $name  Entry name ('/'-separated; directories end in '/').
	 * @param int    $size  Data size (0 for directories).
	 * @param int    $mode  Permission bits.
	 * @param int    $mtime Modification time (Unix seconds).
	 * @param string $type  '0' file, '5' directory.
	 * @return string
	 */
	public static function header( $name, $size, $mode, $mtime, $type = '0' ) {
		$pax = '';
		if ( strlen( $name ) > 100 ) {
			$pax .= self::pax_record( 'path', $name );
		}
		if ( $size > self::USTAR_MAX_SIZE ) {
			$pax .= self::pax_record( 'size', (string) $size );
		}
		$out = '';
		if ( '' !== $pax ) {
			$out .= self::block( '././@PaxHeader', strlen( $pax ), 0644, $mtime, 'x' );
			$out .= $pax . self::padding( strlen( $pax ) );
		}
		$short = strlen( $name ) > 100 ? substr( $name, 0, 100 ) : $name;
		$out  .= self::block( $short, $size > self::USTAR_MAX_SIZE ? 0 : $size, $mode, $mtime, $type );
		return $out;
	}

	/**
	 * Zero bytes that pad $size bytes of data to a 512-byte boundary.
	 *
	 * @param int $size Data size.
	 * @return string
	 */
	public static function padding( $size ) {
		$r = $size % 512;
		return 0 === $r ? '' : str_repeat( "\0", 512 - $r );
	}

	/**
	 * The end-of-archive marker: two zero blocks.
	 *
	 * @return string
	 */
	public static function end() {
		return str_repeat( "\0", 1024 );
	}

	/**
	 * One PAX record: "<len> <key>=<value>\n", len counting itself.
	 *
	 * @param string $key   Keyword.
	 * @param string $value Value.
	 * @return string
	 */
	public static function pax_record( $key, $value ) {
		$rest = ' ' . $key . '=' . $value . "\n";
		$len  = strlen( $rest ) + 1;
		while ( strlen( (string) $len ) + strlen( $rest ) !== $len ) {
			$len = strlen( (string) $len ) + strlen( $rest );
		}
		return $len . $rest;
	}

	/**
	 * One 512-byte ustar header.
	 *
	 * @param string $name  Name (at most 100 bytes).
	 * @param int    $size  Size.
	 * @param int    $mode  Mode bits.
	 * @param int    $mtime Mtime.
	 * @param string $type  Type flag.
	 * @return string
	 */
	private static function block( $name, $size, $mode, $mtime, $type ) {
		$mtime = ( $mtime < 0 || $mtime > 8589934591 ) ? 0 : (int) $mtime;
		$h     = str_pad( $name, 100, "\0" )
			. sprintf( '%07o', $mode & 07777 ) . "\0"
			. sprintf( '%07o', 0 ) . "\0"
			. sprintf( '%07o', 0 ) . "\0"
			. sprintf( '%011o', $size ) . "\0"
			. sprintf( '%011o', $mtime ) . "\0"
			. '        '
			. $type
			. str_repeat( "\0", 100 )
			. "ustar\0" . '00'
			. str_repeat( "\0", 32 )
			. str_repeat( "\0", 32 )
			. str_repeat( "\0", 8 )
			. str_repeat( "\0", 8 )
			. str_repeat( "\0", 155 )
			. str_repeat( "\0", 12 );
		$sum = 0;
		for ( $i = 0; $i < 512; $i++ ) {
			$sum += ord( $h[ $i ] );
		}
		return substr_replace( $h, sprintf( '%06o', $sum ) . "\0 ", 148, 8 );
	}
}

/**
 * Appends bytes to a file handle as one gzip member (deflate_init), as
 * gzip members of at most 1 MiB of input (gzencode only), or as plain
 * bytes (no zlib). A concatenation of gzip members is one gzip stream.
 */
class Sbx_Gz_Sink {

	/** @var resource */
	private $fh;
	/** @var string plain|deflate|gzencode */
	private $mode = 'plain';
	/** @var mixed deflate context */
	private $ctx = null;
	/** @var string */
	private $buf = '';
	/** @var int Uncompressed bytes written. */
	public $raw = 0;

	/**
	 * @param resource $fh       Handle positioned at the end of the archive.
	 * @param bool     $compress Whether to gzip (when zlib is there).
	 */
	public function __construct( $fh, $compress = true ) {
		$this->fh = $fh;
		if ( $compress && self::zlib_available() ) {
			$this->mode = function_exists( 'deflate_init' ) ? 'deflate' : 'gzencode';
		}
	}

	/**
	 * Whether this PHP can write gzip.
	 *
	 * @return bool
	 */
	public static function zlib_available() {
		return function_exists( 'deflate_init' ) || function_exists( 'gzencode' );
	}

	/**
	 * Write bytes.
	 *
	 * @param string $data Uncompressed bytes.
	 * @throws RuntimeException When the disk refuses them.
	 */
	public function write( $data ) {
		if ( '' === $data ) {
			return;
		}
		$this->raw += strlen( $data );
		if ( 'deflate' === $this->mode ) {
			if ( null === $this->ctx ) {
				$this->ctx = deflate_init( ZLIB_ENCODING_GZIP, array( 'level' => 6 ) );
			}
			$this->put( deflate_add( $this->ctx, $data, ZLIB_NO_FLUSH ) );
		} elseif ( 'gzencode' === $this->mode ) {
			$this->buf .= $data;
			if ( strlen( $this->buf ) >= 1048576 ) {
				$this->put( gzencode( $this->buf, 6 ) );
				$this->buf = '';
			}
		} else {
			$this->put( $data );
		}
	}

	/**
	 * End the gzip member (nothing is written if nothing was).
	 *
	 * @throws RuntimeException When the disk refuses the bytes.
	 */
	public function finish() {
		if ( 'deflate' === $this->mode && null !== $this->ctx ) {
			$this->put( deflate_add( $this->ctx, '', ZLIB_FINISH ) );
			$this->ctx = null;
		} elseif ( 'gzencode' === $this->mode && '' !== $this->buf ) {
			$this->put( gzencode( $this->buf, 6 ) );
			$this->buf = '';
		}
		fflush( $this->fh );
	}

	/**
	 * Write to the file, all or fail.
	 *
	 * @param string|false $bytes Bytes.
	 * @throws RuntimeException On a short write.
	 */
	private function put( $bytes ) {
		if ( false === $bytes ) {
			throw new RuntimeException( 'compression failed' );
		}
		$len = strlen( $bytes );
		$off = 0;
		while ( $off < $len ) {
			$n = fwrite( $this->fh, 0 === $off ? $bytes : substr( $bytes, $off ) );
			if ( false === $n || 0 === $n ) {
				throw new RuntimeException( 'could not write the archive (is the disk full?)' );
			}
			$off += $n;
		}
	}
}
