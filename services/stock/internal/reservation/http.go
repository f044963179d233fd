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
	r.Get("/reservations", httpx.NewErrors(logger).Handle(listHandler(db)))
}

// reservationResponse is one element of the GET /reservations answer.
type reservationResponse struct {
	ID        uuid.UUID `json:"id"`
	OrderID   uuid.UUID `json:"order_id"`
	ProductID uuid.UUID `json:"product_id"`
	Quantity  string    `json:"quantity"`
}

func listHandler(db Querier) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		orderID, err := httpx.QueryUUID(r, "order_id")
		if err != nil {
			return err
		}
		list, err := ListByOrder(r.Context(), db, orderID)
		if err != nil {
			return err
		}
		out := make([]reservationResponse, len(list))
		for n, res := range list {
			out[n] = reservationResponse{ID: res.ID, OrderID: res.OrderID, ProductID: res.ProductID, Quantity: res.Quantity}
		}
		httpx.WriteJSON(w, http.StatusOK, out)
		return nil
	}
}
