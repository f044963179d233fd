package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/pg"
	"example.com/shop/services/order/internal/order"
)

// errorRules maps the order domain's errors to problem types for httpx.Errors.Write,
// the one function that answers every failed order request (docs/api-problems.md):
//
//   - order.ErrNotFound: 404 not-found;
//   - order.ErrInvalidTransition (ErrNotDraft, ErrAlreadyCancelled, ErrRejected): 409
//     conflict;
//   - inbox.ErrConflict (an Idempotency-Key used with another request): 422
//     idempotency-key-reused, locating the header;
//   - the database unavailable (pg.Unavailable: refused or dropped connections, a
//     terminated session, no answer within DatabaseTimeout): 503 unavailable with
//     Retry-After, logged at WARN; the request changed nothing unless its transaction had
//     committed, and repeating it with its Idempotency-Key is safe (it then gets the
//     first answer).
//
// Request values the handlers refuse are *httpx.Error values already (400
// invalid-request, 422 validation, see toOrder); anything else is a 500 that reveals
// nothing internal.
func errorRules() []httpx.Rule {
	return []httpx.Rule{
		{Is: order.ErrNotFound, Kind: httpx.KindNotFound, Detail: "no order has this id"},
		{Is: order.ErrNotDraft, Kind: httpx.KindConflict, Detail: "only a draft order can be placed"},
		{Is: order.ErrAlreadyCancelled, Kind: httpx.KindConflict, Detail: "the order is already cancelled"},
		{Is: order.ErrRejected, Kind: httpx.KindConflict, Detail: "stock rejected the order: there is nothing to cancel"},
		{Is: order.ErrInvalidTransition, Kind: httpx.KindConflict, Detail: "the order's status does not allow this"},
		{Is: inbox.ErrConflict, Kind: httpx.KindIdempotencyKeyReused,
			Detail: "this Idempotency-Key was already used with a different request (another body, route or order)",
			Errors: []httpx.FieldError{{Header: headerIdempotencyKey, Detail: "already used with a different request"}}},
		{Match: pg.Unavailable, Kind: httpx.KindUnavailable, RetryAfter: RetryAfter,
			Detail: "the order database is unavailable; retry later"},
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
