<?php
/**
 * Lists wp-content and writes the tar archive, in short resumable steps.
 * Pure PHP (file system only): the state is a plain array that the caller
 * saves between requests. Every step first cuts its output files back to
 * the length the last saved state recorded, so a request that died half
 * way is simply done again.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) && ! defined( 'SBX_PURE' ) ) {
	exit;
}

/**
 * The file list and the archive steps.
 */
class Sbx_File_Exporter {

	/** Bytes read from a file per fread. */
	const READ_BYTES = 1048576;

	/** Notes kept about skipped files. */
	const MAX_NOTES = 50;

	/**
	 * A new list state. $prelude entries go first, as files: each is
	 * array( tar name, absolute source path ).
	 *
	 * @param string $work    Work directory.
	 * @param string $root    Directory to archive (wp-content).
	 * @param string $tar_dir Its name in the archive ('wp-content').
	 * @param array  $prelude Entries before the tree.
	 * @return array
	 * @throws RuntimeException When the work files cannot be made.
	 */
	public static function list_init( $work, $root, $tar_dir, array $prelude ) {
		$list = '';
		foreach ( $prelude as $e ) {
			$list .= self::line( 'f', $e[0], $e[1] );
		}
		self::must_write( $work . '/list.txt', $list );
		self::must_write( $work . '/queue.txt', "\n" );
		return array(
			'root'       => rtrim( $root, '/\\' ),
			'tar_dir'    => trim( $tar_dir, '/' ),
			'list_size'  => strlen( $list ),
			'queue_size' => 1,
			'queue_off'  => 0,
			'entries'    => count( $prelude ),
			'files'      => count( $prelude ),
			'bytes'      => 0,
			'symlinks'   => 0,
			'notes'      => array(),
			'done'       => false,
		);
	}

	/**
	 * List directories until the deadline; true when the tree is done.
	 *
	 * @param array          $st       State from list_init (updated).
	 * @param string         $work     Work directory.
	 * @param Sbx_File_Rules $rules    Exclusions.
	 * @param float          $deadline microtime(true) to stop at.
	 * @return bool
	 * @throws RuntimeException On a write error.
	 */
	public static function list_step( array &$st, $work, Sbx_File_Rules $rules, $deadline ) {
		if ( $st['done'] ) {
			return true;
		}
		$lf = self::open_at( $work . '/list.txt', $st['list_size'] );
		$qf = self::open_at( $work . '/queue.txt', $st['queue_size'] );
		$qr = fopen( $work . '/queue.txt', 'rb' );
		fseek( $qr, $st['queue_off'] );
		while ( microtime( true ) < $deadline ) {
			$line = fgets( $qr );
			if ( false === $line ) {
				$st['done'] = true;
				break;
			}
			$rel = rawurldecode( rtrim( $line, "\n" ) );
			self::list_dir( $st, $rel, $rules, $lf, $qf );
			fflush( $qf );
			$st['queue_off'] = ftell( $qr );
		}
		fclose( $qr );
		$st['list_size']  = self::close( $lf );
		$st['queue_size'] = self::close( $qf );
		return $st['done'];
	}

	/**
	 * List one directory's entries; subdirectories go on the queue.
	 *
	 * @param array          $st    State.
	 * @param string         $rel   Directory relative to the root ('' for the root).
	 * @param Sbx_File_Rules $rules Exclusions.
	 * @param resource       $lf    List handle.
	 * @param resource       $qf    Queue handle.
	 */
	private static function list_dir( array &$st, $rel, Sbx_File_Rules $rules, $lf, $qf ) {
		$abs = '' === $rel ? $st['root'] : $st['root'] . '/' . $rel;
		$dh  = @opendir( $abs );
		if ( false === $dh ) {
			self::note( $st, 'unreadable directory: ' . $rel );
			return;
		}
		while ( false !== ( $name = readdir( $dh ) ) ) {
			if ( '.' === $name || '..' === $name ) {
				continue;
			}
			$crel = '' === $rel ? $name : $rel . '/' . $name;
			$cabs = $abs . '/' . $name;
			$ls   = @lstat( $cabs );
			if ( false === $ls ) {
				continue;
			}
			$type = $ls['mode'] & 0170000;
			if ( 0120000 === $type ) {
				$st['symlinks']++;
				continue; // Symlinks are never followed nor archived.
			}
			if ( $rules->excluded( $crel ) ) {
				continue;
			}
			if ( 0040000 === $type ) {
				self::put( $lf, self::line( 'd', $st['tar_dir'] . '/' . $crel . '/', $cabs ) );
				self::put( $qf, rawurlencode( $crel ) . "\n" );
				$st['entries']++;
			} elseif ( 0100000 === $type ) {
				if ( $ls['size'] > Sbx_File_Rules::MAX_FILE_BYTES ) {
					self::note( $st, 'larger than 4 GiB, left out: ' . $crel );
					continue;
				}
				self::put( $lf, self::line( 'f', $st['tar_dir'] . '/' . $crel, $cabs ) );
				$st['entries']++;
				$st['files']++;
				$st['bytes'] += $ls['size'];
			}
			// Sockets, FIFOs and devices are left out.
		}
		closedir( $dh );
	}

	/**
	 * A new archive state.
	 *
	 * @param bool $compress Whether to gzip.
	 * @return array
	 */
	public static function archive_init( $compress ) {
		return array(
			'compress' => $compress && Sbx_Gz_Sink::zlib_available(),
			'list_off' => 0,
			'index'    => 0,
			'cur'      => null,
			'size'     => 0,
			'members'  => 0,
			'raw'      => 0,
			'notes'    => array(),
			'done'     => false,
		);
	}

	/**
	 * Archive entries until the deadline or until about $max_raw tar bytes
	 * are written; one gzip member per call. True when the archive is done.
	 *
	 * @param array  $st       State from archive_init (updated).
	 * @param string $work     Work directory (holds list.txt).
	 * @param string $archive  Archive path.
	 * @param float  $deadline microtime(true) to stop at.
	 * @param int    $max_raw  Tar bytes per call (at least one block of data).
	 * @return bool
	 * @throws RuntimeException On a write error.
	 */
	public static function archive_step( array &$st, $work, $archive, $deadline, $max_raw = 268435456 ) {
		if ( $st['done'] ) {
			return true;
		}
		$fh   = self::open_at( $archive, $st['size'] );
		$sink = new Sbx_Gz_Sink( $fh, $st['compress'] );
		$lf   = fopen( $work . '/list.txt', 'rb' );
		if ( false === $lf ) {
			throw new RuntimeException( 'the file list is missing' );
		}
		fseek( $lf, $st['list_off'] );
		while ( $sink->raw < $max_raw && microtime( true ) < $deadline ) {
			if ( null !== $st['cur'] ) {
				self::copy( $st, $sink, $max_raw, $deadline );
				continue;
			}
			$line = fgets( $lf );
			if ( false === $line ) {
				$sink->write( Sbx_Tar::end() );
				$st['done'] = true;
				break;
			}
			$st['list_off'] = ftell( $lf );
			$st['index']++;
			$parts = explode( "\t", rtrim( $line, "\n" ) );
			if ( 3 !== count( $parts ) ) {
				continue;
			}
			$name = rawurldecode( $parts[1] );
			$src  = rawurldecode( $parts[2] );
			$ls   = @lstat( $src );
			if ( 'd' === $parts[0] ) {
				if ( false !== $ls && 0040000 === ( $ls['mode'] & 0170000 ) ) {
					$sink->write( Sbx_Tar::header( $name, 0, 0755, $ls['mtime'], '5' ) );
				}
				continue;
			}
			if ( false === $ls || 0100000 !== ( $ls['mode'] & 0170000 ) ) {
				self::note( $st, 'gone or no longer a regular file: ' . $name );
				continue;
			}
			if ( $ls['size'] > Sbx_File_Rules::MAX_FILE_BYTES ) {
				self::note( $st, 'larger than 4 GiB, left out: ' . $name );
				continue;
			}
			$rf = @fopen( $src, 'rb' );
			if ( false === $rf ) {
				self::note( $st, 'unreadable, left out: ' . $name );
				continue;
			}
			fclose( $rf );
			$mode = ( $ls['mode'] & 0111 ) ? 0755 : 0644;
			$sink->write( Sbx_Tar::header( $name, $ls['size'], $mode, $ls['mtime'], '0' ) );
			$st['cur'] = array(
				'name' => $name,
				'src'  => $src,
				'size' => $ls['size'],
				'done' => 0,
			);
			if ( 0 === $ls['size'] ) {
				$st['cur'] = null;
			}
		}
		fclose( $lf );
		$sink->finish();
		$st['raw'] += $sink->raw;
		if ( $sink->raw > 0 ) {
			$st['members']++;
		}
		$st['size'] = self::close( $fh );
		return $st['done'];
	}

	/**
	 * Copy (more of) the current file. The header promised 'size' bytes:
	 * a file that shrank meanwhile is padded with zeros, one that grew is
	 * cut.
	 *
	 * @param array       $st       State.
	 * @param Sbx_Gz_Sink $sink     Output.
	 * @param int         $max_raw  Byte budget.
	 * @param float       $deadline Time budget.
	 */
	private static function copy( array &$st, Sbx_Gz_Sink $sink, $max_raw, $deadline ) {
		$cur = &$st['cur'];
		$rf  = @fopen( $cur['src'], 'rb' );
		if ( false !== $rf && $cur['done'] > 0 ) {
			fseek( $rf, $cur['done'] );
		}
		$short = false;
		while ( $cur['done'] < $cur['size'] ) {
			$want = (int) min( self::READ_BYTES, $cur['size'] - $cur['done'] );
			$data = false === $rf ? false : fread( $rf, $want );
			if ( false === $data || '' === $data ) {
				$short = true;
				$data  = str_repeat( "\0", $want );
			}
			$sink->write( $data );
			$cur['done'] += strlen( $data );
			if ( $sink->raw >= $max_raw || microtime( true ) >= $deadline ) {
				break;
			}
		}
		if ( false !== $rf ) {
			fclose( $rf );
		}
		if ( $short ) {
			self::note( $st, 'changed while being read (padded): ' . $cur['name'] );
		}
		if ( $cur['done'] >= $cur['size'] ) {
			$sink->write( Sbx_Tar::padding( $cur['size'] ) );
			$st['cur'] = null;
		}
	}

	/**
	 * One list line: type, tar name and source path, URL-encoded.
	 *
	 * @param string $type 'f' or 'd'.
	 * @param string $name Tar name.
	 * @param string $src  Source path.
	 * @return string
	 */
	private static function line( $type, $name, $src ) {
		return $type . "\t" . rawurlencode( $name ) . "\t" . rawurlencode( $src ) . "\n";
	}

	/**
	 * Open a file for appending after cutting it to $size bytes.
	 *
	 * @param string $path File.
	 * @param int    $size Committed length.
	 * @return resource
	 * @throws RuntimeException When it cannot be opened.
	 */
	public static function open_at( $path, $size ) {
		$fh = @fopen( $path, 'c+b' );
		if ( false === $fh ) {
			throw new RuntimeException( 'cannot open a work file: ' . basename( $path ) );
		}
		ftruncate( $fh, $size );
		fseek( $fh, 0, SEEK_END );
		return $fh;
	}

	/**
	 * Flush and close; returns the file's length.
	 *
	 * @param resource $fh Handle.
	 * @return int
	 */
	public static function close( $fh ) {
		fflush( $fh );
		$stat = fstat( $fh );
		fclose( $fh );
		return (int) $stat['size'];
	}

	/**
	 * Write all bytes or fail.
	 *
	 * @param resource $fh    Handle.
	 * @param string   $bytes Bytes.
	 * @throws RuntimeException On a short write.
	 */
	public static function put( $fh, $bytes ) {
		if ( '' !== $bytes && fwrite( $fh, $bytes ) !== strlen( $bytes ) ) {
			throw new RuntimeException( 'could not write a work file (is the disk full?)' );
		}
	}

	/**
	 * Create a file with these contents or fail.
	 *
	 * @param string $path  File.
	 * @param string $bytes Contents.
	 * @throws RuntimeException On failure.
	 */
	public static function must_write( $path, $bytes ) {
		if ( false === @file_put_contents( $path, $bytes ) ) {
			throw new RuntimeException( 'cannot write a work file: ' . basename( $path ) );
		}
	}

	/**
	 * Remember a note (bounded).
	 *
	 * @param array  $st   State.
	 * @param string $note Text.
	 */
	private static function note( array &$st, $note ) {
		if ( count( $st['notes'] ) < self::MAX_NOTES ) {
			$st['notes'][] = $note;
		}
	}
}
