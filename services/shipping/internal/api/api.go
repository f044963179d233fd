// Package api serves the shipping service's read-only HTTP API: the stored
// copy of an order's status and the order's shipment, as JSON, with errors as
// RFC 9457 problems.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"example.com/shop/platform/httpx"
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
	logger *slog.Logger
}

// New returns an API reading through reader and logging unexpected errors to
// logger (nil discards them).
func New(reader Reader, logger *slog.Logger) *API {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &API{reader: reader, logger: logger}
}

// orderStatusResponse is the body of GET /order-status/{order_id}.
type orderStatusResponse struct {
	OrderID uuid.UUID `json:"order_id"`
	Status  string    `json:"status"`
	Version int       `json:"version"`
}

// shipmentResponse is the body of GET /shipments/{order_id}; times are RFC 3339
// in UTC.
type shipmentResponse struct {
	ID        uuid.UUID `json:"id"`
	OrderID   uuid.UUID `json:"order_id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (a *API) getOrderStatus(w http.ResponseWriter, r *http.Request) {
	id, err := orderIDParam(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	os, err := a.reader.OrderStatus(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, orderStatusResponse{OrderID: os.OrderID, Status: string(os.Status), Version: os.Version})
}

func (a *API) getShipment(w http.ResponseWriter, r *http.Request) {
	id, err := orderIDParam(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	sh, err := a.reader.Shipment(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, shipmentResponse{
		ID:        sh.ID,
		OrderID:   sh.OrderID,
		Status:    string(sh.Status),
		CreatedAt: sh.CreatedAt.UTC(),
		UpdatedAt: sh.UpdatedAt.UTC(),
	})
}

// problemError carries a problem already worded for the client, such as the
// 400 of a malformed path parameter.
type problemError struct {
	p httpx.Problem
}

func (e *problemError) Error() string { return e.p.Detail }

// orderIDParam parses the {order_id} path parameter; a malformed one is a
// *problemError (400 naming the parameter).
func orderIDParam(r *http.Request) (uuid.UUID, error) {
	id, p := httpx.URLParamUUID(r, "order_id")
	if p != nil {
		return uuid.Nil, &problemError{p: *p}
	}
	return id, nil
}

// writeError is the one place that maps errors to problem responses: a
// *problemError as it is, shipping.ErrNotFound to 404, anything else to a 500
// whose cause is logged and never sent.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var pe *problemError
	switch {
	case errors.As(err, &pe):
		httpx.WriteProblem(w, r, pe.p)
	case errors.Is(err, shipping.ErrNotFound):
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusNotFound, "no such order is known to shipping"))
	default:
		a.logger.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusInternalServerError, "internal error"))
	}
}
