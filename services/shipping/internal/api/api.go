// Package api serves the shipping service's read-only HTTP API: the stored
// copy of an order's status and the order's shipment, as JSON, with errors as
// RFC 9457 problems.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/pg"
	"example.com/shop/services/shipping/internal/shipping"
)

// Reader reads what the handlers serve; *store.Store implements it. Both
// methods return an error wrapping shipping.ErrNotFound for an unknown order.
type Reader interface {
	OrderStatus(ctx context.Context, orderID uuid.UUID) (shipping.OrderStatus, error)
	Shipment(ctx context.Context, orderID uuid.UUID) (shipping.Shipment, error)
}

// API holds the HTTP handlers. It is safe for concurrent use.
type API struct {
	reader Reader
	errs   *httpx.Errors
}

// New returns an API reading through reader and logging unexpected errors to
// logger (nil discards them).
func New(reader Reader, logger *slog.Logger) *API {
	return &API{reader: reader, errs: httpx.NewErrors(logger, errorRules()...)}
}

// orderStatusResponse is the body of GET /order-status/{order_id}.
type orderStatusResponse struct {
	OrderID uuid.UUID `json:"order_id"`
	Status  string    `json:"status"`
	Version int       `json:"version"`
}

// shipmentResponse is the body of GET /shipments/{order_id}; times are RFC 3339
// in UTC with milliseconds (httpx.WriteJSON writes them in httpx.TimeFormat).
type shipmentResponse struct {
	ID        uuid.UUID `json:"id"`
	OrderID   uuid.UUID `json:"order_id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (a *API) getOrderStatus(w http.ResponseWriter, r *http.Request) error {
	id, err := httpx.PathUUID(r, "order_id")
	if err != nil {
		return err
	}
	os, err := a.reader.OrderStatus(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, orderStatusResponse{OrderID: os.OrderID, Status: string(os.Status), Version: os.Version})
	return nil
}

func (a *API) getShipment(w http.ResponseWriter, r *http.Request) error {
	id, err := httpx.PathUUID(r, "order_id")
	if err != nil {
		return err
	}
	sh, err := a.reader.Shipment(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, shipmentResponse{
		ID:        sh.ID,
		OrderID:   sh.OrderID,
		Status:    string(sh.Status),
		CreatedAt: sh.CreatedAt,
		UpdatedAt: sh.UpdatedAt,
	})
	return nil
}

// errorRules maps shipping's errors to problem types for httpx.Errors.Write, the one
// function that answers every failed request (docs/api-problems.md): an order unknown
// to shipping is a 404, the database unavailable a 503 with Retry-After; a malformed
// {order_id} is a 400 (httpx.PathUUID); anything else is logged and answered with a
// 500 whose cause is never sent.
func errorRules() []httpx.Rule {
	return []httpx.Rule{
		{Is: shipping.ErrNotFound, Kind: httpx.KindNotFound, Detail: "no such order is known to shipping"},
		{Match: pg.Unavailable, Kind: httpx.KindUnavailable, RetryAfter: RetryAfter,
			Detail: "the shipping database is unavailable; retry later"},
	}
}

// RetryAfter is the Retry-After of a 503 answered while the database is unavailable
// (5 s, sent in whole seconds).
const RetryAfter = 5 * time.Second
