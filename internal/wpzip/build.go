package wpzip

import (
	"archive/zip"
	"bytes"
	"fmt"
)

// BuildPlugin makes a one-file plugin ZIP (dir/dir.php) whose body is php
// after the header; tests and examples use it.
func BuildPlugin(dir, name, version, php string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create(dir + "/" + dir + ".php")
	fmt.Fprintf(w, "<?php\n/**\n * Plugin Name: %s\n * Version: %s\n */\n%s\n", name, version, php)
	_ = zw.Close()
	return buf.Bytes()
}
