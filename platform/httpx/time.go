package httpx

import "time"

// TimeFormat is how every API writes an instant: RFC 3339 in UTC with exactly
// three fractional digits (milliseconds), e.g. "2026-12-01T10:00:00.120Z", as the
// event envelope's occurred_at. Finer digits are truncated, never rounded, so an
// instant never moves past the next one written.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime writes t in TimeFormat, converted to UTC. WriteJSON writes every
// time.Time so; a response type that holds an instant as a string uses this.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }
