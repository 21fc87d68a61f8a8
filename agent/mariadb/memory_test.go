package mariadb_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/runtime"
)

// TestOneConnectionCannotTakeTheServersMemory: a site's connection may
// raise its session's buffers and in-memory table sizes, and one GROUP BY
// then took 2 GiB of the server every site shares (measured:
// Max_memory_used 2147645312); forty connections would take the node's.
// The server caps what a site can set, so the same query goes to the
// temporary disk; a connection that holds more than SessionMemMB anyway
// (user variables) is ended by the watch.
func TestOneConnectionCannotTakeTheServersMemory(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t)
	if err := srv.CreateSiteDatabase(ctx, "", "wp_mem", "wp_mem", "pw"); err != nil {
		t.Fatal(err)
	}
	// The kernel bounds the server's memory whatever the sites do: its
	// cgroup's limit, read on the host (v2 or v1).
	if got := memoryLimit(runtimeOf(srv)); got != strconv.Itoa(mariadb.DefaultMemoryMB<<20) {
		t.Fatalf("the server's memory limit: %q", got)
	}
	db := openAs(t, srv, "wp_mem", "pw", "wp_mem")
	db.SetMaxOpenConns(1) // one session: its SETs hold for the queries
	for _, v := range []string{"max_heap_table_size", "tmp_table_size", "tmp_memory_table_size", "max_session_mem_used"} {
		// Raised past the cap, a variable stays at the cap (with a warning).
		_, _ = db.ExecContext(ctx, "SET SESSION "+v+" = 4294967296")
		var got string
		if err := db.QueryRowContext(ctx, "SELECT @@SESSION."+v).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.ParseInt(got, 10, 64); n > mariadb.DefaultSessionMemMB<<20 {
			t.Errorf("a site raised %s to %s", v, got)
		}
	}
	// A GROUP BY past the in-memory bound goes to the temporary disk and works.
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT seq, REPEAT('x', 20) r FROM seq_1_to_500000 GROUP BY seq, r) x").Scan(&n); err != nil || n != 500000 {
		t.Fatalf("a large GROUP BY: %d %v", n, err)
	}
	// User variables are counted, but a statement is stopped only at its
	// next check: a SET of many has none, and the connection then holds
	// them (measured: 1 GB). The watch ends such a connection.
	watchFor(t, srv, nil)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	vars := make([]string, 64)
	for i := range vars {
		vars[i] = fmt.Sprintf("@v%d = REPEAT('x', 16000000)", i)
	}
	_, err = conn.ExecContext(ctx, "SET "+strings.Join(vars, ", "))
	t.Logf("1 GB of user variables in one statement: %v", err)
	eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		var held int64
		err := srv.Root().QueryRowContext(ctx, "SELECT COALESCE(MAX(MEMORY_USED), 0) FROM information_schema.PROCESSLIST WHERE USER = 'wp_mem' AND COMMAND <> 'Killed'").Scan(&held)
		if err == nil && held > mariadb.DefaultSessionMemMB<<20 {
			err = fmt.Errorf("a site's connection keeps %d MiB of the server's memory", held>>20)
		}
		return err
	})
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Fatal("the connection that held the memory is still open")
	}

	// Under the bound of one connection, many of one site are bounded
	// together: an eighth of the server's memory (512 MiB here).
	many := openAs(t, srv, "wp_mem", "pw", "wp_mem")
	held := make([]*sql.Conn, 3)
	for i := range held {
		if held[i], err = many.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		defer held[i].Close()
		// The last may be ended while it sets them.
		_, err := held[i].ExecContext(ctx, "SET "+strings.Join(vars[:12], ", "))
		t.Logf("connection %d: 192 MB of user variables: %v", i, err)
	}
	eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		alive := 0
		for _, c := range held {
			if _, err := c.ExecContext(ctx, "SELECT 1"); err == nil {
				alive++
			}
		}
		if alive > 0 {
			return fmt.Errorf("%d of the site's connections holding 576 MB together are open", alive)
		}
		return nil
	})
}

// memoryLimit is the memory limit of the cgroup of namespace ns's MariaDB.
func memoryLimit(rt *runtime.Runtime) string {
	for _, d := range rt.CgroupDirs(mariadb.ContainerID) {
		for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
	}
	return ""
}
