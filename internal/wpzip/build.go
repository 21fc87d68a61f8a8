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

// BuildTheme makes a minimal theme ZIP (dir/style.css, dir/index.php)
// whose index.php is php.
func BuildTheme(dir, name, version, php string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create(dir + "/style.css")
	fmt.Fprintf(w, "/*\nTheme Name: %s\nVersion: %s\n*/\n", name, version)
	w, _ = zw.Create(dir + "/index.php")
	fmt.Fprintf(w, "<?php\n%s\n", php)
	_ = zw.Close()
	return buf.Bytes()
}

// BuildRaw makes a ZIP of the given entries (name → content) in order,
// without any checks: tests use it to build hostile archives.
func BuildRaw(entries ...[2]string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, _ := zw.Create(e[0])
		_, _ = w.Write([]byte(e[1]))
	}
	_ = zw.Close()
	return buf.Bytes()
}
