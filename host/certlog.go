package host

import (
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// certmagicLogger is the zap logger certmagic is given: its errors (a
// storage that fails, a maintenance pass that panicked, a renewal given up)
// go to the host's log, at error; everything below is its own chatter
// ("lock acquired", "obtaining certificate"), which the host's handling of
// its events already says in its own words, and is dropped. certmagic
// writes nothing of its own anywhere.
func certmagicLogger(log *slog.Logger) *zap.Logger {
	return zap.New(zapToSlog{log: log})
}

// zapToSlog is a zap core that hands the entries at error and above to a
// slog logger, their fields as attributes.
type zapToSlog struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c zapToSlog) Enabled(l zapcore.Level) bool { return l >= zapcore.ErrorLevel }

func (c zapToSlog) With(fields []zapcore.Field) zapcore.Core {
	return zapToSlog{log: c.log, fields: append(slices.Clone(c.fields), fields...)}
}

// saidByTheHost are certmagic's errors that the host's report of the
// apply already says (the resource failed, with the reason): logged again
// at every pass, they would repeat what the host keeps quiet about.
var saidByTheHost = []string{"could not get certificate from issuer"}

func (c zapToSlog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) && !slices.Contains(saidByTheHost, e.Message) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c zapToSlog) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clone(c.fields), fields...) {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]any, 0, 2*len(keys)+2)
	if e.LoggerName != "" {
		attrs = append(attrs, "certmagic", e.LoggerName)
	}
	for _, k := range keys {
		attrs = append(attrs, k, enc.Fields[k])
	}
	c.log.Log(context.Background(), slog.LevelError, "certmagic: "+e.Message, attrs...)
	return nil
}

func (zapToSlog) Sync() error { return nil }
