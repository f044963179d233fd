// Package api serves the stock service's HTTP API: the reservations held for an order,
// and the on-hand, reserved and available quantities of a product (set by PUT), as JSON,
// with errors as RFC 9457 problems.
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
	"example.com/shop/services/stock/internal/store"
)

// Store reads and writes what the handlers serve; *store.Store implements it.
type Store interface {
	Reservations(ctx context.Context, orderID uuid.UUID) ([]stock.Reservation, error)
	Level(ctx context.Context, product uuid.UUID) (stock.Level, error)
	SetOnHand(ctx context.Context, product uuid.UUID, onHand stock.Quantity) (stock.Level, error)
}

// API holds the HTTP handlers. It is safe for concurrent use.
type API struct {
	store Store
	errs  *httpx.Errors
}

// New returns an API on st, logging unexpected errors to logger (nil discards them).
func New(st Store, logger *slog.Logger) *API {
	return &API{store: st, errs: httpx.NewErrors(logger, errorRules()...)}
}

// RetryAfter is the Retry-After of a 503 answered while the database is unavailable
// (5 s, sent in whole seconds).
const RetryAfter = 5 * time.Second

// errorRules maps stock's errors to problem types for httpx.Errors.Write, the one
// function that answers every failed request (docs/api-problems.md): the database
// unavailable is a 503 with Retry-After; a missing or malformed order_id or product_id
// is a 400 (httpx.QueryUUID, httpx.PathUUID), an unreadable body a 400, a body over
// httpx.MaxBodyBytes a 413 and a bad on_hand a 422 (httpx.DecodeJSON, putStock); an
// untracked product is a 404; an on_hand below what is reserved a 409; anything else is
// logged and answered with a 500 whose cause is never sent.
func errorRules() []httpx.Rule {
	return []httpx.Rule{
		{Is: store.ErrNotTracked, Kind: httpx.KindNotFound, Detail: "this product has no stock row: it is untracked, always reservable"},
		{Is: store.ErrBelowReserved, Kind: httpx.KindConflict, Detail: "on_hand is below what reservations already hold (see reserved)",
			Errors: []httpx.FieldError{{Pointer: "/on_hand", Detail: "below the reserved quantity"}}},
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
	list, err := a.store.Reservations(r.Context(), orderID)
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

// stockRequest is the body of PUT /products/{product_id}/stock.
type stockRequest struct {
	// OnHand is a decimal string zero or greater with at most 3 fraction digits, such as
	// "10.000"; a JSON number is refused (quantities never pass through a float).
	OnHand string `json:"on_hand"`
}

// stockResponse is a product's stock: decimal strings with three fraction digits;
// available = on_hand - reserved.
type stockResponse struct {
	ProductID uuid.UUID `json:"product_id"`
	OnHand    string    `json:"on_hand"`
	Reserved  string    `json:"reserved"`
	Available string    `json:"available"`
}

func toStockResponse(lv stock.Level) stockResponse {
	return stockResponse{ProductID: lv.ProductID, OnHand: lv.OnHand.String(), Reserved: lv.Reserved.String(),
		Available: lv.Available().String()}
}

// getStock handles GET /products/{product_id}/stock: 200 with the product's stock, 404
// when it is untracked.
func (a *API) getStock(w http.ResponseWriter, r *http.Request) error {
	product, err := httpx.PathUUID(r, "product_id")
	if err != nil {
		return err
	}
	lv, err := a.store.Level(r.Context(), product)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, toStockResponse(lv))
	return nil
}

// putStock handles PUT /products/{product_id}/stock: it sets the on-hand quantity,
// creating the product's stock row (tracked from now on), and answers 200 with the
// stock as written; 422 for an on_hand that is not a decimal string zero or greater with
// at most 9 integer and 3 fraction digits, 409 for one below what is reserved; 400 for
// the nil UUID, which no order line can name.
func (a *API) putStock(w http.ResponseWriter, r *http.Request) error {
	product, err := httpx.PathUUID(r, "product_id")
	if err != nil {
		return err
	}
	if product == uuid.Nil {
		return &httpx.Error{Kind: httpx.KindInvalidRequest, Detail: `path parameter "product_id" is the nil UUID, which names no product`,
			Errors: []httpx.FieldError{{Parameter: "product_id", Detail: "must not be the nil UUID"}}}
	}
	var req stockRequest
	if err := httpx.DecodeJSON(w, r, &req); err != nil {
		return err
	}
	onHand, err := stock.ParseQuantity(req.OnHand)
	if err != nil {
		return httpx.Invalid("on_hand is not a quantity stock can keep",
			httpx.FieldError{Pointer: "/on_hand", Detail: "a decimal string zero or greater with at most 9 integer and 3 fraction digits, such as \"10.000\""})
	}
	lv, err := a.store.SetOnHand(r.Context(), product, onHand)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, toStockResponse(lv))
	return nil
}
