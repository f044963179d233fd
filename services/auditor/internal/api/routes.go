package api

import "github.com/go-chi/chi/v5"

// Routes registers every route of the auditor on r. The shared middleware and /healthz,
// /readyz, /metrics come from httpx.NewRouter; api/openapi.yaml documents the JSON
// routes below, and a test keeps the two in step. The JSON handlers return their errors
// to httpx.Errors.Write (errorRules).
func (a *API) Routes(r chi.Router) {
	r.Get("/", a.page)
	r.Get("/static/*", a.static)
	r.Get("/openapi.yaml", a.openAPI)
	r.Get("/audit", a.audit)
	r.Get("/board", a.errs.Handle(a.board))
	r.Get("/orders/{id}/journey", a.errs.Handle(a.orderJourney))
	r.Get("/events/{event_id}/journey", a.errs.Handle(a.eventJourney))
}
