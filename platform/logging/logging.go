// Package logging builds the structured JSON loggers (log/slog) that every binary passes
// down explicitly; there is no global logger.
//
// Every process logs one shape, whatever wrote the record, for example
// {"time":"2026-12-01T10:42:31.123Z","level":"INFO","msg":"...","service":"order-relay"}:
//   - time (and every other time value) is RFC 3339 in UTC with exactly three
//     fractional digits (milliseconds);
//   - a duration is a number of milliseconds (a float, sub-millisecond digits kept)
//     under its key with "_ms" appended: slog.Duration("retry_in", 1500*time.Millisecond)
//     is written "retry_in_ms":1500; a []time.Duration is a list of such numbers;
//   - service names the process (order-api, order-relay, stock, ...).
//
// NewHandler is the one place that builds this shape; a caller that adds to every
// record (trace ids, for example) wraps the slog.Handler it returns.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"example.com/shop/platform/config"
)

// Attribute keys added by this package.
const (
	KeyService       = "service"
	KeyEventID       = "event_id"
	KeyCorrelationID = "correlation_id"
)

// TimeFormat is the layout of every time value in a log line: RFC 3339, UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// DurationSuffix is appended to the key of every duration attribute, whose value is
// written as milliseconds.
const DurationSuffix = "_ms"

// NewHandler returns the JSON handler of every process: one object per record
// written to w, records below level dropped, times and durations rewritten as the
// package comment describes. Safe for concurrent use.
func NewHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr})
}

// New returns a logger over NewHandler(w, level) with the attribute service=service on
// every record. Safe for concurrent use.
func New(w io.Writer, level slog.Level, service string) *slog.Logger {
	return slog.New(NewHandler(w, level)).With(slog.String(KeyService, service))
}

// replaceAttr writes times as TimeFormat and durations as milliseconds under a key
// ending in DurationSuffix; every other attribute passes unchanged.
func replaceAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindTime:
		return slog.String(a.Key, a.Value.Time().UTC().Format(TimeFormat))
	case slog.KindDuration:
		return slog.Float64(msKey(a.Key), Milliseconds(a.Value.Duration()))
	case slog.KindAny:
		if ds, ok := a.Value.Any().([]time.Duration); ok {
			ms := make([]float64, len(ds))
			for i, d := range ds {
				ms[i] = Milliseconds(d)
			}
			return slog.Any(msKey(a.Key), ms)
		}
	}
	return a
}

// msKey appends DurationSuffix to key unless it already ends with it.
func msKey(key string) string {
	if strings.HasSuffix(key, DurationSuffix) {
		return key
	}
	return key + DurationSuffix
}

// Milliseconds returns d in milliseconds, keeping microseconds as the fraction
// (1234567ns is 1.234).
func Milliseconds(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// WithEvent returns l with the attributes event_id and correlation_id, so every line logged
// while handling one message can be traced back to the event and to the request that
// produced it.
func WithEvent(l *slog.Logger, eventID, correlationID string) *slog.Logger {
	return l.With(slog.String(KeyEventID, eventID), slog.String(KeyCorrelationID, correlationID))
}

// ParseLevel parses a level name as found in a LOG_LEVEL variable: "debug", "info",
// "warn" (or "warning") and "error", in any case, optionally with an offset as slog
// writes it ("warn+2"). An empty string means info. Any other value returns an error
// naming it.
func ParseLevel(s string) (slog.Level, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "":
		return slog.LevelInfo, nil
	case "warning":
		return slog.LevelWarn, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo, fmt.Errorf("logging: unknown level %q (want debug, info, warn or error)", s)
	}
	return l, nil
}

// LevelFromEnv reads LOG_LEVEL through env with ParseLevel (unset: info); a value it
// does not know is recorded on env as an error naming LOG_LEVEL, and info is returned.
func LevelFromEnv(env *config.Env) slog.Level {
	raw := env.String("LOG_LEVEL", "info")
	level, err := ParseLevel(raw)
	if err != nil {
		env.Errorf("LOG_LEVEL", "%q is not one of debug, info, warn, error", raw)
	}
	return level
}
