package mariadb

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// ErrFull marks a statement MariaDB refused for want of room: a table
// on a site's disk past its size ("The table … is full"), or one of the
// bounds the sites share (undo log, temporary space).
var ErrFull = errors.New("the database has no room left")

// MariaDB's errors that mean "no room".
const (
	errRecordFileFull = 1114 // ER_RECORD_FILE_FULL: The table '%s' is full
	errDiskFull       = 1021 // ER_DISK_FULL
)

// Classify wraps err with ErrFull when it is MariaDB saying it had no
// room (whatever the connection: the admin's or a site's own), and
// returns it unchanged otherwise.
func Classify(err error) error {
	if err == nil || errors.Is(err, ErrFull) {
		return err
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return err
	}
	if me.Number == errRecordFileFull || me.Number == errDiskFull || strings.Contains(me.Message, "No space left on device") ||
		strings.Contains(me.Message, "errno: 28 ") {
		return fmt.Errorf("%w: %w", ErrFull, err)
	}
	return err
}
