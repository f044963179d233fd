// Package api serves the stock service's read-only HTTP API: the reservations held
// for an order, as JSON, with errors as RFC 9457 problems.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/pg"
	"example.com/shop/services/stock/internal/stock"
)

// Reader reads what the handlers serve; *store.Store implements it.
type Reader interface {
	Reservations(ctx context.Context, orderID uuid.UUID) ([]stock.Reservation, error)
}

// API holds the HTTP handlers. It is safe for concurrent use.
type API struct {
	reader Reader
	errs   *httpx.Errors
}

// New returns an API reading through reader and logging unexpected errors to logger
// (nil discards them).
func New(reader Reader, logger *slog.Logger) *API {
	return &API{reader: reader, errs: httpx.NewErrors(logger, errorRules()...)}
}

// RetryAfter is the Retry-After of a 503 answered while the database is unavailable
// (5 s, sent in whole seconds).
const RetryAfter = 5 * time.Second

// errorRules maps stock's errors to problem types for httpx.Errors.Write, the one
// function that answers every failed request (docs/api-problems.md): the database
// unavailable is a 503 with Retry-After; a missing or malformed order_id is a 400
// (httpx.QueryUUID); anything else is logged and answered with a 500 whose cause is
// never sent.
func errorRules() []httpx.Rule {
	return []httpx.Rule{
		{Match: pg.Unavailable, Kind: httpx.KindUnavailable, RetryAfter: RetryAfter,
			Detail: "the stock database is unavailable; retry later"},
	}
}

// reservationResponse is one element of the GET /reservations answer; status is
// "held" or "released".
type reservationResponse struct {
	ID        uuid.UUID `json:"id"`
	OrderID   uuid.UUID `json:"order_id"`
	ProductID uuid.UUID `json:"product_id"`
	Quantity  string    `json:"quantity"`
	Status    string    `json:"status"`
}

// listReservations handles GET /reservations?order_id={uuid}: 200 with the order's
// reservations in line order, held or released ([] for an order stock never held
// anything for).
func (a *API) listReservations(w http.ResponseWriter, r *http.Request) error {
	orderID, err := httpx.QueryUUID(r, "order_id")
	if err != nil {
		return err
	}
	list, err := a.reader.Reservations(r.Context(), orderID)
	if err != nil {
		return err
	}
	out := make([]reservationResponse, len(list))
	for n, res := range list {
		out[n] = reservationResponse{ID: res.ID, OrderID: res.OrderID, ProductID: res.ProductID, Quantity: res.Quantity,
			Status: string(res.Status)}
	}
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}
