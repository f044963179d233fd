// Package logging builds the structured JSON loggers (log/slog) that every binary passes
// down explicitly; there is no global logger.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Attribute keys added by this package.
const (
	KeyService       = "service"
	KeyEventID       = "event_id"
	KeyCorrelationID = "correlation_id"
)

// New returns a logger writing one JSON object per record to w, dropping records below
// level, with the attribute service=service on every record, and trace_id and span_id on
// every record logged with a context that holds a span (the *Context methods). Safe for
// concurrent use.
func New(w io.Writer, level slog.Level, service string) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	return slog.New(traceHandler{h}).With(slog.String(KeyService, service))
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
