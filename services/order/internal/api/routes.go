package api

import "github.com/go-chi/chi/v5"

// Routes registers every route of the order API on r (services/order/api/openapi.yaml). The
// shared middleware (request id, logging, metrics, recovery, body limit) and
// /healthz, /readyz, /metrics come from httpx.NewRouter; api/openapi.yaml
// documents each route below, and a test keeps the two in step.
//
// Each order route's database work is bounded by DatabaseTimeout; a
// database outage answers 503 with Retry-After (errorRules). Every handler
// returns its error to httpx.Errors.Write, which answers it as a problem.
func (a *API) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(boundDatabase)
		r.Post("/orders", a.errs.Handle(a.createOrder))
		r.Get("/orders/{id}", a.errs.Handle(a.getOrder))
		r.Post("/orders/{id}/place", a.errs.Handle(a.placeOrder))
		r.Post("/orders/{id}/cancel", a.errs.Handle(a.cancelOrder))
	})
}
