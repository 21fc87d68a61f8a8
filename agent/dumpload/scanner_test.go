package dumpload

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func scanAll(in string, max int) ([]Statement, error) {
	s := NewScanner(strings.NewReader(in), max)
	var out []Statement
	for {
		st, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, st)
	}
}

func TestScanner(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want []string
		line []int
	}{
		{"plain", "SELECT 1;\nSELECT 2;", []string{"SELECT 1", "SELECT 2"}, []int{1, 2}},
		{"doubled quote", "INSERT INTO t VALUES ('it''s;');", []string{"INSERT INTO t VALUES ('it''s;')"}, nil},
		{"escaped quote", `INSERT INTO t VALUES ('a\'b;c');`, []string{`INSERT INTO t VALUES ('a\'b;c')`}, nil},
		{"double quotes", `SELECT "x;y";`, []string{`SELECT "x;y"`}, nil},
		{"backticks", "CREATE TABLE `we;ir``d` (i int);", []string{"CREATE TABLE `we;ir``d` (i int)"}, nil},
		{"dash comment", "-- c;\nSELECT 1;", []string{"SELECT 1"}, []int{2}},
		{"not a comment", "SELECT 1--1;", []string{"SELECT 1--1"}, nil},
		{"hash comment", "# c;\nSELECT 1; # after\n", []string{"SELECT 1"}, nil},
		{"block comment", "SELECT /* ; */ 1;", []string{"SELECT   1"}, nil},
		{"executable comment", "/*!40101 SET NAMES utf8mb4 */;", []string{"/*!40101 SET NAMES utf8mb4 */"}, nil},
		{"mariadb executable", "/*M!100616 SET NOTE_VERBOSITY=0 */;", []string{"/*M!100616 SET NOTE_VERBOSITY=0 */"}, nil},
		{"delimiter", "DELIMITER ;;\nCREATE TRIGGER x BEFORE INSERT ON t FOR EACH ROW BEGIN SET @a=1; SET @b=2; END ;;\nDELIMITER ;\nSELECT 3;",
			[]string{"CREATE TRIGGER x BEFORE INSERT ON t FOR EACH ROW BEGIN SET @a=1; SET @b=2; END ", "SELECT 3"}, []int{2, 4}},
		{"crlf", "SELECT 1;\r\nSELECT 2;\r\n", []string{"SELECT 1", "SELECT 2"}, nil},
		{"no final delimiter", "SELECT 1;\nSELECT 2\n", []string{"SELECT 1", "SELECT 2\n"}, nil},
		{"newline in string", "INSERT INTO t VALUES ('a\nb');\nSELECT 1;", []string{"INSERT INTO t VALUES ('a\nb')", "SELECT 1"}, []int{1, 3}},
		{"empty statements", ";;\n;SELECT 1;", []string{"SELECT 1"}, nil},
		{"backslash in string", `INSERT INTO t VALUES ('\\!');`, []string{`INSERT INTO t VALUES ('\\!')`}, nil},
		{"mariadb sandbox mode", "/*M!999999\\- enable the sandbox mode */ \n-- MariaDB dump\nSELECT 1;", []string{"SELECT 1"}, []int{3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := scanAll(c.in, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %d statements %+v", len(got), got)
			}
			for i, w := range c.want {
				if strings.TrimSpace(got[i].Text) != strings.TrimSpace(w) {
					t.Errorf("statement %d: %q, want %q", i, got[i].Text, w)
				}
				if c.line != nil && got[i].Line != c.line[i] {
					t.Errorf("statement %d on line %d, want %d", i, got[i].Line, c.line[i])
				}
			}
		})
	}
}

func TestScannerRefuses(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     error
	}{
		{"shell escape", "SELECT 1;\n\\! touch /tmp/x\n", ErrClientCommand},
		{"source", "\\. other.sql\n", ErrClientCommand},
		{"sandbox mode mid-statement", "SELECT /*M!999999\\- enable the sandbox mode */ 1;", ErrClientCommand},
		{"sandbox mode look-alike", "/*M!999999\\- enable the sandbox mode */ \\! id\n", ErrClientCommand},
		{"unterminated string", "INSERT INTO t VALUES ('abc", ErrSyntax},
		{"unterminated comment", "SELECT 1 /* no end", ErrSyntax},
		{"too large", "INSERT INTO t VALUES ('" + strings.Repeat("x", 2000) + "');", ErrTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := scanAll(c.in, 1000); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		stmt string
		act  Action
		err  error
		text string
	}{
		{stmt: "INSERT INTO t VALUES ('GRANT ALL ON *.* TO x', 'system', 'INTO OUTFILE')", act: Run},
		{stmt: "CREATE TABLE `grant` (i int)", act: Run},
		{stmt: "LOCK TABLES `wp_posts` WRITE", act: Run},
		{stmt: "SET NAMES utf8mb4", act: Run},
		{stmt: "/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */", act: Run},
		{stmt: "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'", act: Run},
		{stmt: "/*!40000 ALTER TABLE `t` DISABLE KEYS */", act: Run},
		{stmt: "START TRANSACTION", act: Run},
		{stmt: "USE `mysql`", act: Skip},
		{stmt: "use wp", act: Skip},
		{stmt: "CREATE DATABASE /*!32312 IF NOT EXISTS*/ `x` /*!40100 DEFAULT CHARACTER SET utf8mb4 */", act: Skip},
		{stmt: "ALTER DATABASE x CHARACTER SET latin1", act: Skip},
		{stmt: "GRANT ALL ON *.* TO 'a'@'%'", err: ErrForbidden},
		{stmt: "grant select on x.* to b", err: ErrForbidden},
		{stmt: "/*!40000 GRANT ALL ON *.* TO a */", err: ErrForbidden},
		{stmt: "REVOKE ALL ON x.* FROM a", err: ErrForbidden},
		{stmt: "CREATE USER evil IDENTIFIED BY 'x'", err: ErrForbidden},
		{stmt: "CREATE OR REPLACE USER evil", err: ErrForbidden},
		{stmt: "DROP USER IF EXISTS evil", err: ErrForbidden},
		{stmt: "RENAME USER a TO b", err: ErrForbidden},
		{stmt: "CREATE ROLE r", err: ErrForbidden},
		{stmt: "SET PASSWORD FOR a = PASSWORD('x')", err: ErrForbidden},
		{stmt: "SET GLOBAL max_connections = 1", err: ErrForbidden},
		{stmt: "SET @@global.general_log = 1", err: ErrForbidden},
		{stmt: "SET a = 1, GLOBAL b = 2", err: ErrForbidden},
		{stmt: "SET DEFAULT ROLE r FOR a", err: ErrForbidden},
		{stmt: "DROP DATABASE wp", err: ErrForbidden},
		{stmt: "drop schema if exists wp", err: ErrForbidden},
		{stmt: "INSTALL SONAME 'ha_connect'", err: ErrForbidden},
		{stmt: "SHUTDOWN", err: ErrForbidden},
		{stmt: "KILL 1", err: ErrForbidden},
		{stmt: "FLUSH PRIVILEGES", err: ErrForbidden},
		{stmt: "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t", err: ErrForbidden},
		{stmt: "SELECT * FROM t INTO OUTFILE '/tmp/x'", err: ErrForbidden},
		{stmt: "SELECT 1 INTO DUMPFILE '/tmp/x'", err: ErrForbidden},
		{stmt: "CREATE TABLE t (i int) DATA DIRECTORY = '/tmp'", err: ErrForbidden},
		{stmt: "CHANGE MASTER TO MASTER_HOST='x'", err: ErrForbidden},
		{stmt: "START SLAVE", err: ErrForbidden},
		{stmt: "CREATE EVENT e ON SCHEDULE EVERY 1 SECOND DO DELETE FROM t", err: ErrForbidden},
		{stmt: "system touch /tmp/x", err: ErrClientCommand},
		{stmt: "source /etc/passwd", err: ErrClientCommand},
		{stmt: "/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.i = 1 */",
			act: Run, text: "/*!50003 CREATE*/ /*!50017 */ /*!50003 TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.i = 1 */"},
		{stmt: "CREATE ALGORITHM=UNDEFINED DEFINER='a'@'%' SQL SECURITY DEFINER VIEW v AS SELECT 1", act: Run,
			text: "CREATE ALGORITHM=UNDEFINED  SQL SECURITY DEFINER VIEW v AS SELECT 1"},
		{stmt: "CREATE DEFINER = CURRENT_USER() PROCEDURE p() SELECT 1", act: Run, text: "CREATE  PROCEDURE p() SELECT 1"},
	} {
		act, text, err := Check(c.stmt, 7)
		switch {
		case c.err != nil:
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), "line 7") {
				t.Errorf("%s: %v, want %v", c.stmt, err, c.err)
			}
		case err != nil || act != c.act:
			t.Errorf("%s: %v %v, want %v", c.stmt, act, err, c.act)
		case c.text != "" && text != c.text:
			t.Errorf("%s: sent %q, want %q", c.stmt, text, c.text)
		}
	}
}

func FuzzScanner(f *testing.F) {
	for _, s := range []string{"SELECT 1;", "DELIMITER ;;\nx;;\n", "/*!40101 x */;", "'a\\'b';", "`a``b`;", "-- x\n#y\n/* z */;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s := NewScanner(strings.NewReader(in), 256)
		for range 10000 {
			st, err := s.Next()
			if err != nil {
				return
			}
			if len(st.Text) > 256 {
				t.Fatalf("statement of %d bytes past the limit", len(st.Text))
			}
			_, _, _ = Check(st.Text, st.Line)
		}
	})
}

func BenchmarkScanner(b *testing.B) {
	var sb strings.Builder
	for sb.Len() < 8<<20 {
		sb.WriteString("INSERT INTO `wp_posts` VALUES ")
		for i := range 200 {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`(1,'2024-01-01 00:00:00','<p>It\'s a \"post\" with; semicolons\\n and text</p>','a:1:{s:3:\"url\";s:20:\"https://example.com/\";}',NULL)`)
		}
		sb.WriteString(";\n")
	}
	in := sb.String()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		s := NewScanner(strings.NewReader(in), 64<<20)
		for {
			if _, err := s.Next(); err != nil {
				break
			}
		}
	}
}

func TestRewriteLiterals(t *testing.T) {
	up := func(s string) string { return strings.ReplaceAll(s, "old.example", "new.example.org") }
	for _, c := range []struct{ in, want string }{
		{`INSERT INTO t VALUES (1,'http://old.example/a','x')`, `INSERT INTO t VALUES (1,'http://new.example.org/a','x')`},
		{`INSERT INTO t VALUES ('it\'s http://old.example\n', "dq old.example")`, `INSERT INTO t VALUES ('it\'s http://new.example.org\n', 'dq new.example.org')`},
		{"INSERT INTO `old.example` VALUES ('none')", "INSERT INTO `old.example` VALUES ('none')"},
		{`INSERT INTO t VALUES ('a''b old.example')`, `INSERT INTO t VALUES ('a\'b new.example.org')`},
		{`INSERT INTO t VALUES ('100\% old.example')`, `INSERT INTO t VALUES ('100\\% new.example.org')`},
		{`INSERT INTO t VALUES ('nothing here')`, `INSERT INTO t VALUES ('nothing here')`},
	} {
		got, _ := rewriteLiterals(c.in, "old.example", up)
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}
