// Package api serves the stock service's read-only HTTP API: the reservations held
// for an order, as JSON, with errors as RFC 9457 problems.
package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/google/uuid"

	"example.com/shop/platform/httpx"
	"example.com/shop/services/stock/internal/stock"
)

// Reader reads what the handlers serve; *store.Store implements it.
type Reader interface {
	Reservations(ctx context.Context, orderID uuid.UUID) ([]stock.Reservation, error)
}

// API holds the HTTP handlers. It is safe for concurrent use.
type API struct {
	reader Reader
	logger *slog.Logger
}

// New returns an API reading through reader and logging unexpected errors to logger
// (nil discards them).
func New(reader Reader, logger *slog.Logger) *API {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &API{reader: reader, logger: logger}
}

// reservationResponse is one element of the GET /reservations answer.
type reservationResponse struct {
	ID        uuid.UUID `json:"id"`
	OrderID   uuid.UUID `json:"order_id"`
	ProductID uuid.UUID `json:"product_id"`
	Quantity  string    `json:"quantity"`
}

func (a *API) listReservations(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("order_id")
	orderID, err := uuid.Parse(raw)
	if raw == "" || err != nil || len(raw) != 36 {
		p := httpx.NewProblem(http.StatusBadRequest, "query parameter order_id must be a UUID such as 0199b1d4-5c3e-7a51-9c1e-3f2a4b5c6d7e")
		p.Field = "order_id"
		httpx.WriteProblem(w, r, p)
		return
	}
	list, err := a.reader.Reservations(r.Context(), orderID)
	if err != nil {
		a.logger.ErrorContext(r.Context(), "list reservations failed", slog.Any("error", err))
		httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusInternalServerError, "the reservations could not be read"))
		return
	}
	out := make([]reservationResponse, len(list))
	for n, res := range list {
		out[n] = reservationResponse{ID: res.ID, OrderID: res.OrderID, ProductID: res.ProductID, Quantity: res.Quantity}
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}
