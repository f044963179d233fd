package httpx

import (
	"fmt"
	"time"
)

// TimeFormat is how every API writes an instant: RFC 3339 in UTC with exactly
// three fractional digits (milliseconds), e.g. "2026-12-01T10:00:00.120Z", as the
// event envelope's occurred_at. Finer digits are truncated, never rounded, so an
// instant never moves past the next one written.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime writes t in TimeFormat, converted to UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// Time is an instant that a response encodes as a JSON string in TimeFormat
// (encoding/json and go-json-experiment alike). The zero Time encodes as
// "0001-01-01T00:00:00.000Z"; use *Time for an optional member.
type Time time.Time

// TimeOf returns t as a *Time, nil when t is nil: for an optional member.
func TimeOf(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	v := Time(*t)
	return &v
}

// MarshalText writes t in TimeFormat.
func (t Time) MarshalText() ([]byte, error) {
	return []byte(FormatTime(time.Time(t))), nil
}

// UnmarshalText reads any RFC 3339 instant, for clients and tests written in Go.
func (t *Time) UnmarshalText(b []byte) error {
	v, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return fmt.Errorf("httpx: time %q: %w", b, err)
	}
	*t = Time(v)
	return nil
}
