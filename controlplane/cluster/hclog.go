package cluster

import (
	"context"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger bridges raft's hclog to slog: the one place where raft's
// logging is adapted, so every line carries our component attributes.
func newHCLogger(log *slog.Logger) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:   "raft",
		Output: io.Discard,
		Level:  hclog.Debug,
	})
	l.RegisterSink(slogSink{log: log})
	return l
}

type slogSink struct{ log *slog.Logger }

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	var lv slog.Level
	switch level {
	case hclog.Trace, hclog.Debug:
		lv = slog.LevelDebug
	case hclog.Warn:
		lv = slog.LevelWarn
	case hclog.Error:
		lv = slog.LevelError
	default:
		lv = slog.LevelInfo
	}
	if !s.log.Enabled(context.Background(), lv) {
		return
	}
	s.log.Log(context.Background(), lv, msg, append([]any{"logger", name}, args...)...)
}
