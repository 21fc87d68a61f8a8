package toolbox

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/internal/sitepath"
)

//go:embed files/fileman.php
var fileman string

// MaxFileBytes bounds what one file-manager call reads or writes.
const MaxFileBytes = 32 << 20

// FileOp is one file-manager operation on a site; paths are relative to
// its WordPress root and already decoded.
type FileOp struct {
	Op       string // list, read, write, upload, mkdir, delete, rename, copy
	Path     string
	From, To string
	Content  []byte
	Filename string // upload: the name of the uploaded file
}

// FileError is a refusal by the file manager; Code is invalid, not_found,
// conflict, too_large or disk_full.
type FileError struct{ Code, Message string }

func (e *FileError) Error() string { return e.Code + ": " + e.Message }

var fileOps = map[string]bool{"list": true, "read": true, "write": true, "upload": true, "mkdir": true,
	"delete": true, "rename": true, "copy": true}

// FileAnswer is the file manager's answer to one operation.
type FileAnswer struct {
	OK   bool   `json:"ok"`
	Path string `json:"path"`
	From string `json:"from"`
	To   string `json:"to"`
	// SizeBytes is what a write or upload wrote, or a read read.
	SizeBytes *int64      `json:"sizeBytes"`
	Entries   []FileEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
	// ContentBase64 answers a read; Content is it decoded.
	ContentBase64 string `json:"contentBase64"`
	Content       []byte `json:"-"`
}

// FileEntry is one entry of a directory listing.
type FileEntry struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	SizeBytes  int64  `json:"sizeBytes"`
	ModifiedAt string `json:"modifiedAt"`
}

// Files runs one file-manager operation and returns its answer. It runs
// inside the site's container as www-data, so the kernel, not only the
// checks, keeps it within what the site itself could touch; its output
// is parsed strictly here, so nothing else reaches the control plane.
func (b *Box) Files(ctx context.Context, id string, op FileOp) (*FileAnswer, error) {
	if !fileOps[op.Op] {
		return nil, &FileError{"invalid", fmt.Sprintf("unknown operation %q", op.Op)}
	}
	for _, p := range []*string{&op.Path, &op.From, &op.To} {
		c, err := sitepath.Clean(*p)
		if err != nil {
			return nil, &FileError{"invalid", err.Error()}
		}
		*p = c
	}
	if len(op.Content) > MaxFileBytes {
		return nil, &FileError{"too_large", fmt.Sprintf("content is over %d MiB", MaxFileBytes>>20)}
	}
	if op.Op == "write" || op.Op == "upload" {
		if err := b.sites.CheckDisk(id, int64(len(op.Content))); err != nil {
			return nil, &FileError{"disk_full", err.Error()}
		}
	}
	req, err := json.Marshal(map[string]any{"op": op.Op, "path": op.Path, "from": op.From, "to": op.To,
		"contentBase64": base64.StdEncoding.EncodeToString(op.Content), "filename": op.Filename, "maxBytes": MaxFileBytes})
	if err != nil {
		return nil, err
	}
	code := strings.TrimPrefix(strings.TrimSpace(fileman), "<?php")
	res, err := b.sites.Exec(ctx, id, []string{"php", "-d", "memory_limit=-1", "-d", "display_errors=stderr", "-r", code}, req)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("file manager: exit %d: %s", res.ExitCode, res.Stderr)
	}
	var out struct {
		FileAnswer
		Error *FileError `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(res.Stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("file manager: bad answer %.200q: %w", res.Stdout, err)
	}
	if out.Error != nil {
		if out.Error.Code == "disk_full" {
			out.Error.Message = b.sites.DiskFullError(id).Error()
		}
		return nil, out.Error
	}
	a := out.FileAnswer
	if a.ContentBase64 != "" {
		if a.Content, err = base64.StdEncoding.DecodeString(a.ContentBase64); err != nil {
			return nil, fmt.Errorf("file manager: content is not base64: %w", err)
		}
		a.ContentBase64 = ""
	}
	return &a, nil
}

// IsFileError reports whether err is a refusal of the file manager.
func IsFileError(err error) (*FileError, bool) {
	var fe *FileError
	ok := errors.As(err, &fe)
	return fe, ok
}
