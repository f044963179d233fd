package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/pg"
	"example.com/shop/services/order/internal/order"
)

// writeError is the one place that turns an error into a response. Domain
// errors become their documented status with a problem+json body; anything
// else is logged and answered with a 500 that reveals nothing internal.
//
//   - *order.FieldError: 422 naming the field;
//   - order.ErrNotFound: 404;
//   - order.ErrInvalidTransition (ErrNotDraft, ErrAlreadyCancelled): 409;
//   - inbox.ErrConflict (an Idempotency-Key used with another request): 422
//     naming the Idempotency-Key header;
//   - a cancelled request context: 503 (the client has usually gone);
//   - the database unavailable (pg.Unavailable: refused or dropped
//     connections, a terminated session, no answer within DatabaseTimeout):
//     503 with Retry-After, logged at WARN; the request changed nothing
//     unless its transaction had committed, and repeating it with its
//     Idempotency-Key is safe (it then gets the first answer).
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var fe *order.FieldError
	switch {
	case errors.As(err, &fe):
		p := httpx.NewProblem(http.StatusUnprocessableEntity, fe.Field+": "+fe.Err.Error())
		p.Field = fe.Field
		httpx.WriteProblem(w, r, p)
	case errors.Is(err, order.ErrNotFound):
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusNotFound, "no order has this id"))
	case errors.Is(err, order.ErrNotDraft):
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusConflict, "only a draft order can be placed"))
	case errors.Is(err, order.ErrAlreadyCancelled):
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusConflict, "the order is already cancelled"))
	case errors.Is(err, order.ErrInvalidTransition):
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusConflict, "the order's status does not allow this"))
	case errors.Is(err, inbox.ErrConflict):
		p := httpx.NewProblem(http.StatusUnprocessableEntity,
			"this Idempotency-Key was already used with a different request (another body, route or order)")
		p.Field = headerIdempotencyKey
		httpx.WriteProblem(w, r, p)
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		a.logger.InfoContext(r.Context(), "request cancelled", slog.String("path", r.URL.Path))
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusServiceUnavailable, "the request was cancelled"))
	case pg.Unavailable(err) || errors.Is(context.Cause(r.Context()), errDatabaseTimeout):
		a.logger.WarnContext(r.Context(), "order request: database unavailable",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusServiceUnavailable,
			"the order database is unavailable; retry later"))
	default:
		a.logger.ErrorContext(r.Context(), "order request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusInternalServerError, "an unexpected error occurred"))
	}
}

// DatabaseTimeout bounds the database work of one order request (5 s),
// connecting and waiting for a pooled connection included; past it the
// request answers 503 with Retry-After.
const DatabaseTimeout = 5 * time.Second

// RetryAfter is the Retry-After of a 503 answered while the database is
// unavailable (5 s, sent in whole seconds).
const RetryAfter = 5 * time.Second

// errDatabaseTimeout is the cause of a request context that ran out of
// DatabaseTimeout.
var errDatabaseTimeout = errors.New("database did not answer within the request's budget")

// boundDatabase gives each request a context that ends after
// DatabaseTimeout, so that no request waits for the database for ever.
func boundDatabase(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeoutCause(r.Context(), DatabaseTimeout, errDatabaseTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
