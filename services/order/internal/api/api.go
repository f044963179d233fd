// Package api is the order service's HTTP interface: it decodes and checks
// requests, calls the store, and maps results and errors to JSON and
// problem+json responses (services/order/api/openapi.yaml).
package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/services/order/internal/order"
	"example.com/shop/services/order/internal/store"
)

// headerIdempotencyKey is the optional request header of the POST routes.
const headerIdempotencyKey = "Idempotency-Key"

// headerReplayed is set to "true" on a response that repeats the answer of an
// earlier request with the same Idempotency-Key.
const headerReplayed = "Idempotent-Replayed"

// maxIdempotencyKey is the longest Idempotency-Key accepted, in bytes.
const maxIdempotencyKey = 255

// IdempotencyConsumer is the inbox consumer under which the API keeps the
// Idempotency-Keys of its POST routes in processed_event (docs/inbox.md), with the
// first answer to each; `order purge-outbox` purges them with the outbox.
const IdempotencyConsumer = "order-api"

// API serves the order routes. It holds no per-request state and is safe for
// concurrent use.
type API struct {
	store *store.Store
	idem  *inbox.Consumer
	errs  *httpx.Errors
	now   func() time.Time
}

// New returns the API on st. A nil logger discards logs; the idempotency inbox
// registers its counters (inbox_*_total{consumer="order-api"}) on reg, unless nil.
func New(st *store.Store, logger *slog.Logger, reg prometheus.Registerer) *API {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	idem := inbox.NewConsumer(inbox.Config{Name: IdempotencyConsumer, Mode: inbox.ReturnStored, Logger: logger, Registerer: reg})
	return &API{store: st, idem: idem, errs: httpx.NewErrors(logger, errorRules()...), now: time.Now}
}

// answer is a response of a POST route, as the idempotency inbox stores it and
// replays it. Body is the JSON text, kept as a string so that a replay sends the
// very bytes of the first answer.
type answer struct {
	Status   int    `json:"status"`
	Location string `json:"location,omitempty"`
	Body     string `json:"body"`
}

// orderAnswer is the answer status with o as its body.
func orderAnswer(status int, o *order.Order, location string) (answer, error) {
	body, err := json.Marshal(toResponse(o))
	if err != nil {
		return answer{}, fmt.Errorf("encode order: %w", err)
	}
	return answer{Status: status, Location: location, Body: string(body) + "\n"}, nil
}

// idempotencyKey returns the request's Idempotency-Key ("" without one), or a
// KindInvalidRequest error naming the header when it is repeated or malformed.
func idempotencyKey(r *http.Request) (string, error) {
	keys := r.Header.Values(headerIdempotencyKey)
	if len(keys) == 0 {
		return "", nil
	}
	if len(keys) > 1 || !validIdempotencyKey(keys[0]) {
		detail := fmt.Sprintf("must be given once, 1 to %d visible ASCII characters", maxIdempotencyKey)
		return "", &httpx.Error{Kind: httpx.KindInvalidRequest, Detail: headerIdempotencyKey + " " + detail,
			Errors: []httpx.FieldError{{Header: headerIdempotencyKey, Detail: detail}}}
	}
	return keys[0], nil
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

// respond runs op and writes its answer, or returns the error. Without a key op runs in a transaction of
// its own. With a key it runs through the idempotency inbox in mode ReturnStored:
// the key, content (the canonical request: route, order id, normalised body),
// op's writes and its answer commit together; a request with the same key and
// content gets the stored answer with Idempotent-Replayed: true, even when the
// order changed since, and one with the same key and another content 422. An op
// that fails stores nothing, so its retry runs again. A first request writes
// op's answer as op built it; only a replay decodes the stored one.
func (a *API) respond(w http.ResponseWriter, r *http.Request, key string, content []byte, op func(context.Context, store.Tx) (answer, error)) error {
	var (
		ans      answer
		replayed bool
		err      error
	)
	run := func(ctx context.Context, tx store.Tx) (any, error) {
		var err error
		ans, err = op(ctx, tx)
		return ans, err
	}
	if key == "" {
		err = a.store.InTx(r.Context(), func(ctx context.Context, tx store.Tx) error {
			_, err := run(ctx, tx)
			return err
		})
	} else {
		var out inbox.Outcome
		out, err = a.store.Idempotent(r.Context(), a.idem, inbox.Message{Key: key, Content: content}, run)
		if err == nil && out.Duplicate {
			replayed = true
			if err = json.Unmarshal(out.Result, &ans); err != nil {
				err = fmt.Errorf("stored answer of Idempotency-Key %q: %w", key, err)
			}
		}
	}
	if err != nil {
		return err
	}
	if ans.Location != "" {
		w.Header().Set("Location", ans.Location)
	}
	if replayed {
		w.Header().Set(headerReplayed, "true")
	}
	w.Header().Set("Content-Type", httpx.ContentTypeJSON)
	w.WriteHeader(ans.Status)
	_, _ = io.WriteString(w, ans.Body)
	return nil
}

// createOrder handles POST /orders: 201 with the new draft order and its
// Location; with an Idempotency-Key already used for the same request, the first
// answer again (see respond); 400/413/415 for a body that cannot be decoded; 422
// for a value that is not acceptable or a key used with another request.
func (a *API) createOrder(w http.ResponseWriter, r *http.Request) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	var req createOrderRequest
	if err := httpx.DecodeJSON(w, r, &req); err != nil {
		return err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("new order id: %w", err)
	}
	o, err := req.toOrder(id, a.now())
	if err != nil {
		return err
	}
	return a.respond(w, r, key, createContent(o), func(ctx context.Context, tx store.Tx) (answer, error) {
		if err := tx.Create(ctx, o); err != nil {
			return answer{}, err
		}
		return orderAnswer(http.StatusCreated, o, "/orders/"+o.ID().String())
	})
}

// createContent is the canonical request of POST /orders: what it asks for (the
// customer and the normalised lines, in order), so that "3" and "3.000" are one
// request.
func createContent(o *order.Order) []byte {
	var b strings.Builder
	b.WriteString("POST /orders\n")
	b.WriteString(o.CustomerID().String())
	for _, l := range o.Lines() {
		b.WriteString("\n" + l.ProductID.String() + " " + l.Quantity.String())
	}
	return []byte(b.String())
}

// getOrder handles GET /orders/{id}: 200 with the order (a rejected one with
// its rejection), 400 for an id that is not a UUID, 404 when no order has it.
func (a *API) getOrder(w http.ResponseWriter, r *http.Request) error {
	id, err := httpx.PathUUID(r, "id")
	if err != nil {
		return err
	}
	o, err := a.store.Get(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, toResponse(o))
	return nil
}

// placeOrder handles POST /orders/{id}/place: 200 with the placed order, 400
// for a bad id or a body other than none or {} (413/415 as for createOrder), 404 for an unknown order, 409 when it is not a draft. The
// transition, the new version and the order.order.placed.v1 outbox row commit
// together (store.Tx.Update). With an Idempotency-Key a retry gets the first 200
// again, even after the order changed (see respond).
func (a *API) placeOrder(w http.ResponseWriter, r *http.Request) error {
	return a.transition(w, r, (*order.Order).Place)
}

// cancelOrder handles POST /orders/{id}/cancel: 200 with the cancelled order
// (a draft, placed or confirmed one), 400 for a bad id, 404 for an unknown
// order, 409 when it is already cancelled or was rejected. The
// order.order.cancelled.v1 outbox row commits with it; on it stock releases
// what it holds for the order. An
// Idempotency-Key works as for placeOrder.
func (a *API) cancelOrder(w http.ResponseWriter, r *http.Request) error {
	return a.transition(w, r, (*order.Order).Cancel)
}

func (a *API) transition(w http.ResponseWriter, r *http.Request, apply func(*order.Order, time.Time) error) error {
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	id, err := httpx.PathUUID(r, "id")
	if err != nil {
		return err
	}
	// The transition takes no values: a body, if any, is {}.
	if err := httpx.DecodeEmptyJSON(w, r); err != nil {
		return err
	}
	// The route and the order are the request: one key on another order or
	// another transition is a conflict.
	content := []byte("POST " + chi.RouteContext(r.Context()).RoutePattern() + " " + id.String())
	return a.respond(w, r, key, content, func(ctx context.Context, tx store.Tx) (answer, error) {
		var changed *order.Order
		err := tx.Update(ctx, id, func(o *order.Order) error {
			if err := apply(o, a.now()); err != nil {
				return err
			}
			changed = o
			return nil
		})
		if err != nil {
			return answer{}, err
		}
		return orderAnswer(http.StatusOK, changed, "")
	})
}
