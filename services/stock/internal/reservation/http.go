package reservation

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"example.com/shop/platform/httpx"
)

// Routes adds the stock HTTP API to r:
//
//	GET /reservations?order_id={uuid}  200 [{"id","order_id","product_id","quantity"}]
//	                                   400 problem when order_id is missing or not a UUID
func Routes(r chi.Router, db Querier, logger *slog.Logger) {
	r.Get("/reservations", listHandler(db, logger))
}

// reservationResponse is one element of the GET /reservations answer.
type reservationResponse struct {
	ID        uuid.UUID `json:"id"`
	OrderID   uuid.UUID `json:"order_id"`
	ProductID uuid.UUID `json:"product_id"`
	Quantity  string    `json:"quantity"`
}

func listHandler(db Querier, logger *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw := r.URL.Query().Get("order_id")
		orderID, err := httpx.ParseUUID(raw)
		if err != nil {
			p := httpx.NewProblem(http.StatusBadRequest, "query parameter order_id must be a UUID such as 0199b1d4-5c3e-7a51-9c1e-3f2a4b5c6d7e")
			p.Field = "order_id"
			httpx.WriteProblem(w, r, p)
			return
		}
		list, err := ListByOrder(r.Context(), db, orderID)
		if err != nil {
			logger.ErrorContext(r.Context(), "list reservations failed", slog.Any("error", err))
			httpx.WriteProblem(w, r, httpx.NewProblem(http.StatusInternalServerError, "the reservations could not be read"))
			return
		}
		out := make([]reservationResponse, len(list))
		for n, res := range list {
			out[n] = reservationResponse{ID: res.ID, OrderID: res.OrderID, ProductID: res.ProductID, Quantity: res.Quantity}
		}
		httpx.WriteJSON(w, http.StatusOK, out)
	}
}
