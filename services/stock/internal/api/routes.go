package api

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
)

// NewHandler returns the service's whole HTTP handler: httpx.NewRouter (request ids,
// logging, recovery, metrics, /healthz, /readyz running checks, /metrics serving reg)
// with every stock route added by Routes.
func NewHandler(api *API, logger *slog.Logger, reg *prometheus.Registry, checks ...httpx.Check) http.Handler {
	r := httpx.NewRouter(logger, reg, checks...)
	api.Routes(r)
	return r
}

// Routes adds every stock route to r. It is the one list of the service's endpoints
// (besides /healthz, /readyz and /metrics from httpx.NewRouter):
//
//	GET /reservations?order_id={uuid}       200 [reservationResponse] | 400 | 503
//	GET /products/{product_id}/stock        200 stockResponse | 400 | 404 | 503
//	PUT /products/{product_id}/stock        200 stockResponse | 400 | 409 | 413 | 415 | 422 | 503
func (a *API) Routes(r chi.Router) {
	r.Get("/reservations", a.errs.Handle(a.listReservations))
	r.Get("/products/{product_id}/stock", a.errs.Handle(a.getStock))
	r.Put("/products/{product_id}/stock", a.errs.Handle(a.putStock))
}
