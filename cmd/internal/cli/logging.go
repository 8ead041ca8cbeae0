package cli

import (
	"io"
	"log/slog"

	"github.com/spf13/pflag"
)

// logOptions are the --log-level and --log-format flags of the
// long-running commands (manager, dashboard, watch).
type logOptions struct {
	level  string
	format string
}

// addLogFlags binds --log-level (default level) and --log-format to f.
func (o *logOptions) addLogFlags(f *pflag.FlagSet, level string) {
	f.Var(newChoice(&o.level, level, "debug", "info", "warn", "error"), "log-level", "the least severe log level written to stderr (debug shows every lease-affecting decision)")
	f.Var(newChoice(&o.format, "text", "text", "json"), "log-format", "write logs to stderr as logfmt-style text or as one JSON object per line (slog's JSON)")
}

// logger returns the logger the flags ask for, writing to w.
func (o *logOptions) logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(o.level)) // one of the choices
	opts := &slog.HandlerOptions{Level: level}
	if o.format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
