package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Error is an error the client must see as a problem of a given kind. Handlers return it
// (or wrap it) for what they decided themselves; DecodeJSON, PathUUID and QueryUUID return
// it for requests they cannot read. Err, the cause, is logged and never sent.
type Error struct {
	// Kind selects the problem type and status code.
	Kind Kind
	// Detail explains the occurrence to the client; empty means the kind's title.
	Detail string
	// Errors locates each request value at fault.
	Errors []FieldError
	// RetryAfter, when positive, is sent as Retry-After in whole seconds (at least 1).
	RetryAfter time.Duration
	// Err is the cause, for logs; it may be nil.
	Err error
}

// Error returns the detail and the cause.
func (e *Error) Error() string {
	msg := string(e.Kind)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	for _, fe := range e.Errors {
		msg += fmt.Sprintf("; %s%s%s: %s", fe.Pointer, fe.Parameter, fe.Header, fe.Detail)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Invalid returns a KindValidation error locating each value at fault.
func Invalid(detail string, errs ...FieldError) *Error {
	return &Error{Kind: KindValidation, Detail: detail, Errors: errs}
}

// Rule maps the errors of a service's domain to one kind of problem: an error that wraps
// Is (errors.Is), or for which Match returns true, is answered with Kind, Detail and
// Errors. Set one of Is and Match.
type Rule struct {
	// Is is a domain sentinel error, such as order.ErrNotFound.
	Is error
	// Match recognises errors that are no sentinel, such as pg.Unavailable.
	Match func(error) bool
	// Kind, Detail, Errors and RetryAfter make the answer, as in Error.
	Kind       Kind
	Detail     string
	Errors     []FieldError
	RetryAfter time.Duration
}

// Errors turns the errors of a service's handlers into problem responses; its Write is the
// one place where a service's errors meet HTTP. It is safe for concurrent use.
type Errors struct {
	logger *slog.Logger
	rules  []Rule
}

// NewErrors returns an Errors that logs to logger (nil discards) and maps errors with
// rules, first match first (see Write).
func NewErrors(logger *slog.Logger, rules ...Rule) *Errors {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Errors{logger: logger, rules: rules}
}

// Handle adapts a handler that returns its error: a nil error means h has answered; any
// other is answered by Write. h must not write a response when it returns an error.
func (e *Errors) Handle(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			e.Write(w, r, err)
		}
	}
}

// Write answers err as an RFC 9457 problem, deciding in this order:
//   - a *Error (errors.As): its kind, detail, field errors and Retry-After;
//   - the first Rule that matches, in the order given to NewErrors;
//   - the request's own context cancelled (the client has gone): 503, logged at INFO;
//   - anything else: 500 with a detail that reveals nothing, err logged at ERROR.
//
// Every 503 is logged at WARN with its cause, every 500 at ERROR; 4xx answers are not
// logged here (the request log line has their status).
func (e *Errors) Write(w http.ResponseWriter, r *http.Request, err error) {
	var he *Error
	if !errors.As(err, &he) {
		he = e.classify(r, err)
	}
	detail := he.Detail
	if detail == "" {
		detail = he.Kind.Title()
	}
	switch status := he.Kind.Status(); {
	case status == http.StatusInternalServerError:
		e.logger.ErrorContext(r.Context(), "http request failed", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Any("error", err))
		detail = "an unexpected error occurred"
	case status == http.StatusServiceUnavailable && !errors.Is(he.Err, errClientGone):
		e.logger.WarnContext(r.Context(), "http request: dependency unavailable", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	if he.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(he.RetryAfter.Round(time.Second)/time.Second))))
	}
	writeProblem(w, r, he.Kind, detail, he.Errors)
}

// errClientGone marks a request whose client went away before the answer.
var errClientGone = errors.New("the request was cancelled")

func (e *Errors) classify(r *http.Request, err error) *Error {
	for _, rule := range e.rules {
		if (rule.Is != nil && errors.Is(err, rule.Is)) || (rule.Match != nil && rule.Match(err)) {
			return &Error{Kind: rule.Kind, Detail: rule.Detail, Errors: rule.Errors, RetryAfter: rule.RetryAfter, Err: err}
		}
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		e.logger.InfoContext(r.Context(), "http request cancelled", slog.String("method", r.Method),
			slog.String("path", r.URL.Path))
		return &Error{Kind: KindUnavailable, Detail: "the request was cancelled", Err: errClientGone}
	}
	return &Error{Kind: KindInternal, Err: err}
}
