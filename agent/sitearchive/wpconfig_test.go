package sitearchive

import (
	"errors"
	"testing"
)

// TestParseWPConfig: the table prefix and charset are found as PHP would
// see them, and a value that is not a plain name is refused.
func TestParseWPConfig(t *testing.T) {
	for _, c := range []struct {
		name, src       string
		prefix, charset string
		err             error
	}{
		{"stock", "<?php\ndefine( 'DB_CHARSET', 'utf8mb4' );\n$table_prefix = 'wp_';\n", "wp_", "utf8mb4", nil},
		{"double quotes and spaces", "<?php define(\"DB_CHARSET\",\"utf8\");\n$table_prefix\t=  \"wpx_\" ;", "wpx_", "utf8", nil},
		{"none", "<?php echo 1;", "", "", nil},
		{"line comments", "<?php\n// $table_prefix = 'a_';\n# $table_prefix = 'b_';\n$table_prefix = 'c_';", "c_", "", nil},
		{"block comment", "<?php /* $table_prefix = 'a_';\n define('DB_CHARSET', 'latin1'); */ $table_prefix = 'b_';", "b_", "", nil},
		{"comment marker in a string", "<?php $x = 'http://a/*'; $table_prefix = 'p_'; $y = '*/';", "p_", "", nil},
		{"last assignment wins", "<?php $table_prefix = 'a_'; $table_prefix = 'b_';", "b_", "", nil},
		{"first define wins", "<?php define('DB_CHARSET', 'utf8'); define('DB_CHARSET', 'latin1');", "", "utf8", nil},
		{"define with case flag", "<?php DEFINE('DB_CHARSET', 'utf8', true);", "", "utf8", nil},
		{"empty charset", "<?php define('DB_CHARSET', '');", "", "", nil},
		{"expression is not a literal", "<?php $table_prefix = getenv('P') ?: 'wp_';", "", "", nil},
		{"concatenation is not a literal", "<?php $table_prefix = 'wp' . '_';", "", "", nil},
		{"hostile", `<?php $table_prefix = 'wp\'; drop';`, "", "", ErrUnsafe},
		{"hostile double quotes", `<?php $table_prefix = "wp'; drop";`, "", "", ErrUnsafe},
		{"interpolation", `<?php $table_prefix = "{$p}_";`, "", "", ErrUnsafe},
		{"hostile charset", `<?php define('DB_CHARSET', 'utf8"; x');`, "", "", ErrUnsafe},
		{"empty prefix", `<?php $table_prefix = '';`, "", "", ErrFormat},
		{"long prefix", `<?php $table_prefix = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';`, "", "", ErrFormat},
		{"unterminated", "<?php $table_prefix = 'wp_", "", "", nil},
		{"trailing backslash", `<?php $x = '\`, "", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := parseWPConfig([]byte(c.src))
			if c.err != nil {
				if !errors.Is(got.err, c.err) {
					t.Fatalf("err %v, want %v", got.err, c.err)
				}
				return
			}
			if got.err != nil || got.prefix != c.prefix || got.charset != c.charset {
				t.Errorf("got %+v, want prefix %q charset %q", got, c.prefix, c.charset)
			}
		})
	}
}
