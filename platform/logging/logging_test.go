package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
)

func decodeLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestNewWritesJSONWithService(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := logging.New(&buf, slog.LevelInfo, "stock")
	l.Debug("dropped")
	l.Info("reserved", "order_id", "o-1")

	lines := decodeLines(t, &buf)
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1 (debug dropped): %s", len(lines), buf.String())
	}
	got := lines[0]
	if got["service"] != "stock" || got["msg"] != "reserved" || got["order_id"] != "o-1" || got["level"] != "INFO" {
		t.Errorf("record = %v", got)
	}
}

func TestWithEvent(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := logging.WithEvent(logging.New(&buf, slog.LevelDebug, "shipping"), "ev-1", "corr-1")
	l.Debug("handled")

	got := decodeLines(t, &buf)[0]
	if got["event_id"] != "ev-1" || got["correlation_id"] != "corr-1" || got["service"] != "shipping" {
		t.Errorf("record = %v", got)
	}
}

func TestParseLevel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want slog.Level
	}{
		{"", slog.LevelInfo},
		{"debug", slog.LevelDebug},
		{"INFO", slog.LevelInfo},
		{" warn ", slog.LevelWarn},
		{"warning", slog.LevelWarn},
		{"error", slog.LevelError},
		{"warn+2", slog.LevelWarn + 2},
	}
	for _, tt := range tests {
		got, err := logging.ParseLevel(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if _, err := logging.ParseLevel("loud"); err == nil || !strings.Contains(err.Error(), `"loud"`) {
		t.Errorf("ParseLevel(loud) error = %v, want one naming the value", err)
	}
}

// TestHandlerShape: every record carries a millisecond RFC 3339 UTC time, the
// service, and durations as milliseconds under _ms keys, also inside groups, in
// lists and as time values of attributes.
func TestHandlerShape(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := logging.New(&buf, slog.LevelInfo, "order-relay")
	at := time.Date(2026, 12, 1, 11, 2, 3, 456789000, time.FixedZone("CET", 3600))
	l.Info("shape",
		slog.Duration("took", 20870525*time.Nanosecond),
		slog.Duration("paused_ms", 3*time.Millisecond),
		slog.Any("retry_delays", []time.Duration{time.Second, 1500 * time.Microsecond}),
		slog.Time("published_at", at),
		slog.Group("config", slog.Duration("poll_interval", time.Second)),
		slog.Int64("blocked_ms", 7),
	)
	line := strings.TrimSpace(buf.String())
	got := decodeLines(t, &buf)[0]

	ts, ok := got["time"].(string)
	if !ok {
		t.Fatalf("time = %v, want a string", got["time"])
	}
	if _, err := time.Parse(time.RFC3339, ts); err != nil || !strings.HasSuffix(ts, "Z") || len(ts) != len("2026-12-01T10:02:03.456Z") {
		t.Errorf("time = %q, want RFC 3339 in UTC with milliseconds (%v)", ts, err)
	}
	want := map[string]any{
		"service":         "order-relay",
		"took_ms":         20.87,
		"paused_ms":       3.0,
		"retry_delays_ms": []any{1000.0, 1.5},
		"published_at":    "2026-12-01T10:02:03.456Z",
		"config":          map[string]any{"poll_interval_ms": 1000.0},
		"blocked_ms":      7.0,
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	for _, k := range []string{"took", "retry_delays", "paused_ms_ms"} {
		if _, ok := got[k]; ok {
			t.Errorf("record still has key %q: %s", k, line)
		}
	}
}

func TestLevelFromEnv(t *testing.T) {
	t.Parallel()
	env := config.NewEnv(func(k string) string { return map[string]string{"LOG_LEVEL": "debug"}[k] })
	if got := logging.LevelFromEnv(env); got != slog.LevelDebug || env.Err() != nil {
		t.Errorf("LevelFromEnv(debug) = %v, %v", got, env.Err())
	}
	env = config.NewEnv(func(k string) string { return map[string]string{"LOG_LEVEL": "loud"}[k] })
	if got := logging.LevelFromEnv(env); got != slog.LevelInfo || env.Err() == nil || !strings.Contains(env.Err().Error(), "LOG_LEVEL") {
		t.Errorf("LevelFromEnv(loud) = %v, %v; want info and an error naming LOG_LEVEL", got, env.Err())
	}
}
