package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
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
//   - a cancelled request context: 503 (the client has usually gone).
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
	default:
		a.logger.ErrorContext(r.Context(), "order request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusInternalServerError, "an unexpected error occurred"))
	}
}
