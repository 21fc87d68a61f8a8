package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// importArchive is a live site's archive for the import bench: the
// bench site's own WordPress database grown to posts posts (each ~1 KiB
// of content linking the site's URL, with serialized meta), and files
// files of ~16 KiB under wp-content/uploads, as tar.gz.
func importArchive(db *sql.DB, siteURL string, posts, files int) ([]byte, int, error) {
	var dump bytes.Buffer
	dump.WriteString("/*!40101 SET NAMES utf8mb4 */;\n/*!40014 SET FOREIGN_KEY_CHECKS=0 */;\n")
	rows, err := db.Query("SHOW FULL TABLES WHERE Table_type = 'BASE TABLE'")
	if err != nil {
		return nil, 0, err
	}
	var tables []string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, 0, err
		}
		tables = append(tables, name)
	}
	rows.Close()
	for _, tbl := range tables {
		var name, create string
		if err := db.QueryRow("SHOW CREATE TABLE `"+tbl+"`").Scan(&name, &create); err != nil {
			return nil, 0, err
		}
		fmt.Fprintf(&dump, "DROP TABLE IF EXISTS `%s`;\n%s;\n", tbl, create)
		if err := dumpRows(db, &dump, tbl); err != nil {
			return nil, 0, err
		}
	}
	// The bulk: posts and their meta, as mysqldump's extended INSERTs.
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string { return strconv.FormatUint(rng.Uint64(), 36) }
	for start := 0; start < posts; start += 200 {
		var vals, meta []string
		for id := 1000 + start; id < 1000+min(posts, start+200); id++ {
			var body strings.Builder
			for body.Len() < 1000 {
				fmt.Fprintf(&body, `<p>%s %s <a href="%s/?p=%d">%s</a> <img src="%s/wp-content/uploads/f%d.jpg"></p>\n`, word(), word(), siteURL, id, word(), siteURL, id%max(files, 1))
			}
			vals = append(vals, fmt.Sprintf("(%d,1,'2024-01-01 00:00:00','2024-01-01 00:00:00',%s,'Post %d','','publish','open','open','','post-%d','','','2024-01-01 00:00:00','2024-01-01 00:00:00','',0,%s,0,'post','',0)",
				id, sqlString(body.String()), id, id, sqlString(fmt.Sprintf("%s/?p=%d", siteURL, id))))
			meta = append(meta, fmt.Sprintf("(%d,'_bench',%s)", id, sqlString(fmt.Sprintf(`a:2:{s:3:"url";s:%d:"%s/?p=%d";s:1:"n";i:%d;}`,
				len(fmt.Sprintf("%s/?p=%d", siteURL, id)), siteURL, id, id))))
		}
		fmt.Fprintf(&dump, "INSERT INTO `wp_posts` (`ID`,`post_author`,`post_date`,`post_date_gmt`,`post_content`,`post_title`,`post_excerpt`,`post_status`,`comment_status`,`ping_status`,`post_password`,`post_name`,`to_ping`,`pinged`,`post_modified`,`post_modified_gmt`,`post_content_filtered`,`post_parent`,`guid`,`menu_order`,`post_type`,`post_mime_type`,`comment_count`) VALUES %s;\n", strings.Join(vals, ","))
		fmt.Fprintf(&dump, "INSERT INTO `wp_postmeta` (`post_id`,`meta_key`,`meta_value`) VALUES %s;\n", strings.Join(meta, ","))
	}
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add("backup.sql", dump.Bytes()); err != nil {
		return nil, 0, err
	}
	blob := make([]byte, 16<<10)
	for i := range files {
		for j := range blob { // half random, half text: compresses as real uploads roughly do
			if j%2 == 0 {
				blob[j] = byte(rng.Uint32())
			} else {
				blob[j] = 'a' + byte(j%26)
			}
		}
		if err := add(fmt.Sprintf("wp-content/uploads/%d/f%d.jpg", i/500, i), blob); err != nil {
			return nil, 0, err
		}
	}
	tw.Close()
	zw.Close()
	return out.Bytes(), dump.Len() + files*len(blob), nil
}

// sqlString quotes a value as mysqldump does.
func sqlString(v string) string {
	r := strings.NewReplacer("\\", `\\`, "'", `\'`, "\"", `\"`, "\n", `\n`, "\r", `\r`, "\x00", `\0`, "\x1a", `\Z`)
	return "'" + r.Replace(v) + "'"
}

func dumpRows(db *sql.DB, w *bytes.Buffer, tbl string) error {
	rows, err := db.Query("SELECT * FROM `" + tbl + "`")
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var vals []string
	for rows.Next() {
		raw := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		vs := make([]string, len(cols))
		for i, v := range raw {
			if v == nil {
				vs[i] = "NULL"
			} else {
				vs[i] = sqlString(string(v))
			}
		}
		vals = append(vals, "("+strings.Join(vs, ",")+")")
	}
	if len(vals) > 0 {
		fmt.Fprintf(w, "INSERT INTO `%s` VALUES %s;\n", tbl, strings.Join(vals, ","))
	}
	return rows.Err()
}

// importPhases measures a restore (complete → ready: the archive
// streamed to the node, unpacked in the site, the dump loaded, URLs
// moved, the staged content put in place) against `tar -xzf` and the
// `mariadb` client loading the same archive in the same site's container
// (alternated). The ratio is baseline time over restore time: above 1
// the restore is faster.
func importPhases(ctx context.Context, sys *system, n int) error {
	made, err := sys.api("POST", "/api/app/sites", `{"name":"Import bench"}`)
	if err != nil {
		return err
	}
	site := made["site"].(map[string]any)
	siteID := site["id"].(string)
	if err := sys.waitJob(ctx, made["jobId"].(string)); err != nil {
		return err
	}
	acc, err := sys.api("GET", "/api/app/sites/"+siteID+"/database", "")
	if err != nil {
		return err
	}
	dbi := acc["database"].(map[string]any)
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.DBName = dbi["user"].(string), dbi["password"].(string), "tcp", dbi["name"].(string)
	c.Addr = fmt.Sprintf("%v:%v", dbi["host"], dbi["port"])
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	const source = "https://live.example.com"
	archive, unpacked, err := importArchive(db, source, 20000, 3000)
	if err != nil {
		return err
	}
	fmt.Printf("  an import restored in place (complete → ready) vs tar -xzf + mariadb < dump in the site's container, %d each (alternated):\n", n)
	fmt.Printf("    archive: %.1f MB tar.gz, %.1f MB unpacked (a 20,000-post dump and 3,000 files)\n",
		float64(len(archive))/(1<<20), float64(unpacked)/(1<<20))
	mgr := sys.agent.Sites()
	baseline := `set -e; rm -rf /srv/site/tmp/bench; mkdir -p /srv/site/tmp/bench; tar -xzf - -C /srv/site/tmp/bench
mariadb -S /run/mysqld/mysqld.sock -u "$1" -p"$2" "$3" < /srv/site/tmp/bench/backup.sql; rm -rf /srv/site/tmp/bench`
	var base, restore, upload []time.Duration
	cl := sys.apiClient()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		res, err := mgr.Exec(ctx, siteID, []string{"/bin/sh", "-c", baseline, "sh", c.User, c.Passwd, c.DBName}, archive)
		if err != nil || res.ExitCode != 0 {
			return fmt.Errorf("baseline: %v %s", err, res.Stderr)
		}
		base = append(base, time.Since(t0))

		body := fmt.Sprintf(`{"sourceUrl":%q,"sizeBytes":%d,"siteId":%q}`, source, len(archive), siteID)
		imp, err := sys.api("POST", "/api/app/imports", body)
		if err != nil {
			return err
		}
		id := imp["import"].(map[string]any)["id"].(string)
		t0 = time.Now()
		for off := 0; off < len(archive); off += 32 << 20 {
			end := min(len(archive), off+32<<20)
			r, err := cl.Call(ctx, "PUT", "/api/app/imports/"+id+"/upload", archive[off:end], "Content-Type", "application/octet-stream",
				"X-Service-Offset", strconv.Itoa(off))
			if err != nil {
				return fmt.Errorf("upload: %w", err)
			}
			_ = r
		}
		upload = append(upload, time.Since(t0))
		t0 = time.Now()
		if _, err := sys.api("POST", "/api/app/imports/"+id+"/complete", ""); err != nil {
			return err
		}
		for {
			out, err := sys.api("GET", "/api/app/imports/"+id, "")
			if err != nil {
				return err
			}
			st := out["import"].(map[string]any)["status"]
			if st == "ready" {
				break
			}
			if st != "restoring" {
				return fmt.Errorf("import %s: %v %v", id, st, out["import"].(map[string]any)["failureReason"])
			}
			time.Sleep(20 * time.Millisecond)
		}
		restore = append(restore, time.Since(t0))
	}
	mb := float64(len(archive)) / (1 << 20)
	fmt.Printf("    baseline p50 %s (%.0f MB/s of archive) | restore p50 %s (%.0f MB/s): %.2fx of the baseline's speed (goal >= 0.8x)\n",
		ms(pct(base, .5)), mb/pct(base, .5).Seconds(), ms(pct(restore, .5)), mb/pct(restore, .5).Seconds(),
		float64(pct(base, .5))/float64(pct(restore, .5)))
	fmt.Printf("    upload over the API in 32 MiB chunks p50 %s (%.0f MB/s)\n", ms(pct(upload, .5)), mb/pct(upload, .5).Seconds())
	return sys.deleteSite(ctx, siteID)
}
