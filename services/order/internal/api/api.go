// Package api is the order service's HTTP interface: it decodes and checks
// requests, calls the store, and maps results and errors to JSON and
// problem+json responses (DESIGN.md "HTTP").
package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"example.com/shop/platform/httpx"
	"example.com/shop/services/order/internal/order"
	"example.com/shop/services/order/internal/store"
)

// headerIdempotencyKey is the optional request header of POST /orders.
const headerIdempotencyKey = "Idempotency-Key"

// headerReplayed is set to "true" on a POST /orders response that returns the
// order created by an earlier request with the same Idempotency-Key.
const headerReplayed = "Idempotent-Replayed"

// maxIdempotencyKey is the longest Idempotency-Key accepted, in bytes.
const maxIdempotencyKey = 255

// API serves the order routes. It holds no per-request state and is safe for
// concurrent use.
type API struct {
	store  *store.Store
	logger *slog.Logger
	now    func() time.Time
}

// New returns the API on st. A nil logger discards logs.
func New(st *store.Store, logger *slog.Logger) *API {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &API{store: st, logger: logger, now: time.Now}
}

// createOrder handles POST /orders: 201 with the new draft order and its
// Location; with an Idempotency-Key already used for the same request, 201
// with the order that request created (as it is now) and Idempotent-Replayed:
// true; 400/413/415 for a body that cannot be decoded; 422 for a value that
// is not acceptable or a key reused with another request.
func (a *API) createOrder(w http.ResponseWriter, r *http.Request) {
	keys := r.Header.Values(headerIdempotencyKey)
	key, hasKey := r.Header.Get(headerIdempotencyKey), len(keys) > 0
	if hasKey && (len(keys) > 1 || !validIdempotencyKey(key)) {
		p := httpx.NewProblem(http.StatusBadRequest,
			fmt.Sprintf("%s must be given once, 1 to %d visible ASCII characters", headerIdempotencyKey, maxIdempotencyKey))
		p.Field = headerIdempotencyKey
		httpx.WriteProblem(w, r, p)
		return
	}
	var req createOrderRequest
	if p := httpx.DecodeJSON(w, r, &req); p != nil {
		httpx.WriteProblem(w, r, *p)
		return
	}
	id, err := uuid.NewV7()
	if err != nil {
		a.writeError(w, r, fmt.Errorf("new order id: %w", err))
		return
	}
	o, err := req.toOrder(id, a.now())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if hasKey {
		got, created, err := a.store.CreateIdempotent(r.Context(), key, o)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if !created {
			w.Header().Set(headerReplayed, "true")
		}
		o = got
	} else if err := a.store.Create(r.Context(), o); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/orders/"+o.ID().String())
	httpx.WriteJSON(w, http.StatusCreated, toResponse(o))
}

func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > maxIdempotencyKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// getOrder handles GET /orders/{id}: 200 with the order, 400 for an id that
// is not a UUID, 404 when no order has it.
func (a *API) getOrder(w http.ResponseWriter, r *http.Request) {
	id, p := httpx.URLParamUUID(r, "id")
	if p != nil {
		httpx.WriteProblem(w, r, *p)
		return
	}
	o, err := a.store.Get(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, toResponse(o))
}

// placeOrder handles POST /orders/{id}/place: 200 with the placed order, 400
// for a bad id, 404 for an unknown order, 409 when it is not a draft. The
// transition, the new version and the order.order.placed.v1 outbox row commit
// together (store.Store.Update).
func (a *API) placeOrder(w http.ResponseWriter, r *http.Request) {
	a.transition(w, r, (*order.Order).Place)
}

// cancelOrder handles POST /orders/{id}/cancel: 200 with the cancelled order,
// 400 for a bad id, 404 for an unknown order, 409 when it is already
// cancelled. The order.order.cancelled.v1 outbox row commits with it.
func (a *API) cancelOrder(w http.ResponseWriter, r *http.Request) {
	a.transition(w, r, (*order.Order).Cancel)
}

func (a *API) transition(w http.ResponseWriter, r *http.Request, apply func(*order.Order, time.Time) error) {
	id, p := httpx.URLParamUUID(r, "id")
	if p != nil {
		httpx.WriteProblem(w, r, *p)
		return
	}
	var changed *order.Order
	err := a.store.Update(r.Context(), id, func(o *order.Order) error {
		if err := apply(o, a.now()); err != nil {
			return err
		}
		changed = o
		return nil
	})
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, toResponse(changed))
}
