package logging

import (
	"errors"
	"log/slog"
)

// AttrError is an error that carries log attributes about what failed, such as the
// event_id of the event a handler could not process, so that the one place that logs
// the failure names it without knowing where it came from.
type AttrError interface {
	error
	LogAttrs() []slog.Attr
}

// ErrorAttrs returns the attributes of the first AttrError in err's chain
// (errors.As), or nil. A caller logging err adds them to its line:
// logger.With(logging.ErrorAttrs(err)...) after converting, or LogAttrs(ctx, level,
// msg, append(attrs, ErrorAttrs(err)...)...).
func ErrorAttrs(err error) []slog.Attr {
	var ae AttrError
	if errors.As(err, &ae) {
		return ae.LogAttrs()
	}
	return nil
}
