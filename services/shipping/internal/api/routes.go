package api

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
)

// NewHandler returns the service's whole HTTP handler: httpx.NewRouter (request
// ids, logging, recovery, metrics, /healthz, /readyz running checks, /metrics
// serving reg) with every shipping route added by Routes.
func NewHandler(api *API, logger *slog.Logger, reg *prometheus.Registry, checks ...httpx.Check) http.Handler {
	r := httpx.NewRouter(logger, reg, checks...)
	api.Routes(r)
	return r
}

// Routes adds every shipping route to r. It is the one list of the service's
// endpoints (besides /healthz, /readyz and /metrics from httpx.NewRouter):
//
//	GET /order-status/{order_id}  200 orderStatusResponse | 400 | 404
//	GET /shipments/{order_id}     200 shipmentResponse    | 400 | 404
func (a *API) Routes(r chi.Router) {
	r.Get("/order-status/{order_id}", a.errs.Handle(a.getOrderStatus))
	r.Get("/shipments/{order_id}", a.errs.Handle(a.getShipment))
}
