package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// importsProgress shows an upload and a restore on stderr: bars on a
// terminal, plain lines otherwise (so CI logs stay readable).
type importsProgress interface {
	// Sending is where the chunk being sent is (a bar's smooth motion).
	Sending(done, total int64)
	// Uploaded is what the server has acknowledged.
	Uploaded(done, total int64)
	// Restore is the restore's phase and percent.
	Restore(phase string, percent int)
	// Stop ends whatever bar is drawn, so that a message can follow.
	Stop()
}

// importsNewProgress picks bars when w is a terminal.
func importsNewProgress(w io.Writer) importsProgress {
	if isTerminal(w) {
		return &importsBars{w: w}
	}
	return &importsLines{w: w, lastUpload: -1, lastRestore: -1}
}

// importsLines prints a line after the first chunk and then at most one
// per 10%, and a line per restore phase or 10% of it.
type importsLines struct {
	w           io.Writer
	lastUpload  int64 // tenths of the upload last printed, -1 before any
	phase       string
	lastRestore int
}

func (l *importsLines) Sending(int64, int64) {}

func (l *importsLines) Uploaded(done, total int64) {
	tenth := done * 10 / max(total, 1)
	if l.lastUpload >= 0 && tenth <= l.lastUpload {
		return
	}
	l.lastUpload = tenth
	fmt.Fprintf(l.w, "uploaded %s of %s (%d%%)\n", byteSize(done), byteSize(total), done*100/max(total, 1))
}

func (l *importsLines) Restore(phase string, percent int) {
	if phase == l.phase && percent/10 <= l.lastRestore/10 {
		return
	}
	l.phase, l.lastRestore = phase, percent
	fmt.Fprintf(l.w, "restore: %s %d%%\n", phase, percent)
}

func (l *importsLines) Stop() {}

// importsBars draws progressbar bars: bytes while uploading, percent
// while restoring.
type importsBars struct {
	w       io.Writer
	upload  *progressbar.ProgressBar
	restore *progressbar.ProgressBar
	phase   string
}

func (b *importsBars) Sending(done, total int64) {
	if b.upload == nil {
		b.upload = progressbar.NewOptions64(total, progressbar.OptionSetWriter(b.w), progressbar.OptionSetDescription("uploading"),
			progressbar.OptionShowBytes(true), progressbar.OptionShowCount(), progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetWidth(20), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }))
	}
	_ = b.upload.Set64(done)
}

func (b *importsBars) Uploaded(done, total int64) { b.Sending(done, total) }

func (b *importsBars) Restore(phase string, percent int) {
	b.stopUpload()
	if b.restore == nil {
		b.restore = progressbar.NewOptions(100, progressbar.OptionSetWriter(b.w), progressbar.OptionSetWidth(20),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }))
	}
	if phase != b.phase {
		b.phase = phase
		b.restore.Describe(fmt.Sprintf("%-13s", phase))
	}
	_ = b.restore.Set(min(max(percent, 0), 100))
}

// Stop ends the bars; Exit ends a line a bar left unfinished.
func (b *importsBars) Stop() {
	b.stopUpload()
	if b.restore != nil && !b.restore.IsFinished() {
		_ = b.restore.Exit()
	}
	b.restore = nil
}

func (b *importsBars) stopUpload() {
	if b.upload != nil && !b.upload.IsFinished() {
		_ = b.upload.Exit()
	}
	b.upload = nil
}
