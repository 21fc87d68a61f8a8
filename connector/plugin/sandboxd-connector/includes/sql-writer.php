<?php
/**
 * SQL text for the database dump: value escaping and INSERT building.
 * Pure PHP: no WordPress or database calls.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) && ! defined( 'SBX_PURE' ) ) {
	exit;
}

/**
 * Escaping and the fixed parts of a mysqldump-compatible dump.
 */
class Sbx_Sql {

	/** Upper bound (bytes) of one extended INSERT, unless a single row is larger. */
	const MAX_STATEMENT = 1048576;

	/**
	 * Escape a string for a single-quoted MySQL literal as
	 * mysqli_real_escape_string does on a utf8mb4 connection: \0 \n \r
	 * \ ' " and \x1a get a backslash, every other byte is copied (valid
	 * UTF-8 sequences never contain those bytes). Binary-safe.
	 *
	 * (mysqlnd built where char is unsigned, e.g. on ARM, also puts a
	 * backslash before a stray UTF-8 lead byte; MySQL reads "\<byte>" as
	 * "<byte>", so both forms load the same value.)
	 *
	 * @param string $s Raw value.
	 * @return string
	 */
	public static function escape( $s ) {
		static $map = array(
			"\\"   => '\\\\',
			"\0"   => '\\0',
			"\n"   => '\\n',
			"\r"   => '\\r',
			"'"    => "\\'",
			'"'    => '\\"',
			"\x1a" => '\\Z',
		);
		return strtr( (string) $s, $map );
	}

	/**
	 * A value as SQL: NULL, or a quoted escaped string.
	 *
	 * @param mixed         $v       Column value as the driver returned it.
	 * @param callable|null $escaper Escaper (defaults to self::escape).
	 * @return string
	 */
	public static function quote( $v, $escaper = null ) {
		if ( null === $v ) {
			return 'NULL';
		}
		if ( is_bool( $v ) ) {
			$v = $v ? '1' : '0';
		}
		$e = $escaper ? call_user_func( $escaper, (string) $v ) : self::escape( (string) $v );
		return "'" . $e . "'";
	}

	/**
	 * A quoted identifier.
	 *
	 * @param string $name Table or column name.
	 * @return string
	 */
	public static function ident( $name ) {
		return '`' . str_replace( '`', '``', $name ) . '`';
	}

	/**
	 * A string for a LIKE pattern: \, _ and % taken literally.
	 *
	 * @param string $s Literal text.
	 * @return string
	 */
	public static function like_escape( $s ) {
		return addcslashes( $s, '\\_%' );
	}

	/**
	 * The dump's first lines.
	 *
	 * @param string $charset Connection character set the rows were read in.
	 * @return string
	 */
	public static function header( $charset = 'utf8mb4' ) {
		$charset = preg_replace( '/[^A-Za-z0-9_]/', '', $charset );
		return "/*!40101 SET NAMES " . $charset . " */;\n"
			. "SET FOREIGN_KEY_CHECKS=0;\n"
			. "/*!40101 SET SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;\n"
			. "/*!40103 SET TIME_ZONE='+00:00' */;\n"
			. "-- Sandboxd Connector database dump\n\n";
	}

	/**
	 * DROP and CREATE for one table.
	 *
	 * @param string $table  Table name.
	 * @param string $create SHOW CREATE TABLE's statement.
	 * @return string
	 */
	public static function table_prelude( $table, $create ) {
		return "\n--\n-- Table " . str_replace( array( "\n", "\r" ), ' ', $table ) . "\n--\n\n"
			. 'DROP TABLE IF EXISTS ' . self::ident( $table ) . ";\n"
			. rtrim( $create, "; \n\r\t" ) . ";\n\n";
	}

	/**
	 * The dump's last line.
	 *
	 * @return string
	 */
	public static function footer() {
		return "\nSET FOREIGN_KEY_CHECKS=1;\n";
	}
}

/**
 * Builds extended INSERT statements of bounded size, row by row.
 */
class Sbx_Insert_Builder {

	/** @var string */
	private $prefix;
	/** @var int */
	private $max;
	/** @var callable|null */
	private $escaper;
	/** @var string */
	private $buf = '';

	/**
	 * @param string        $table   Table name.
	 * @param array|null    $columns Column names to list, or null for all.
	 * @param int           $max     Statement size bound in bytes.
	 * @param callable|null $escaper String escaper (defaults to Sbx_Sql::escape).
	 */
	public function __construct( $table, $columns = null, $max = Sbx_Sql::MAX_STATEMENT, $escaper = null ) {
		$this->prefix = 'INSERT INTO ' . Sbx_Sql::ident( $table );
		if ( is_array( $columns ) ) {
			$this->prefix .= ' (' . implode( ',', array_map( array( 'Sbx_Sql', 'ident' ), $columns ) ) . ')';
		}
		$this->prefix .= ' VALUES ';
		$this->max     = max( 1024, (int) $max );
		$this->escaper = $escaper;
	}

	/**
	 * Add a row; returns the statement(s) completed by it ('' if none).
	 *
	 * @param array $row Values in column order.
	 * @return string
	 */
	public function add( array $row ) {
		$vals = array();
		foreach ( $row as $v ) {
			$vals[] = Sbx_Sql::quote( $v, $this->escaper );
		}
		$tuple = '(' . implode( ',', $vals ) . ')';
		$out   = '';
		if ( '' !== $this->buf && strlen( $this->buf ) + strlen( $tuple ) + 3 > $this->max ) {
			$out       = $this->buf . ";\n";
			$this->buf = '';
		}
		$this->buf .= ( '' === $this->buf ? $this->prefix : ',' ) . $tuple;
		return $out;
	}

	/**
	 * The last, unfinished statement ('' if there is none).
	 *
	 * @return string
	 */
	public function finish() {
		$out       = '' === $this->buf ? '' : $this->buf . ";\n";
		$this->buf = '';
		return $out;
	}
}
