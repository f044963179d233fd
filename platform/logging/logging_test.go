package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

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
