package httpx

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrNotConnected is the readiness error of a dependency a process still
// waits for at start-up.
var ErrNotConnected = errors.New("not connected yet")

// Pending returns a readiness Check named name that fails with
// ErrNotConnected while p is nil, then runs fn on the value p holds (fn's
// receiver-first shape takes a method expression such as
// (*pgxpool.Pool).Ping). A process
// that opens its HTTP port before it connects to its database or broker stores
// each connection in p once it is made.
func Pending[T any](name string, p *atomic.Pointer[T], fn func(*T, context.Context) error) Check {
	return Check{Name: name, Fn: func(ctx context.Context) error {
		if v := p.Load(); v != nil {
			return fn(v, ctx)
		}
		return ErrNotConnected
	}}
}

// Switch is an http.Handler that passes each request to the handler last given
// to Set, so a process can answer /healthz and /readyz while it connects to its
// dependencies and switch to its full router once they are there. It is safe
// for concurrent use.
type Switch struct {
	h atomic.Pointer[http.Handler]
}

// NewSwitch returns a Switch serving h.
func NewSwitch(h http.Handler) *Switch {
	s := &Switch{}
	s.Set(h)
	return s
}

// Set makes h serve every request from now on.
func (s *Switch) Set(h http.Handler) { s.h.Store(&h) }

// ServeHTTP passes the request to the current handler.
func (s *Switch) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.h.Load()).ServeHTTP(w, r) }

// StartingRouter returns the router a process serves while it waits for its
// dependencies: /healthz, /readyz (running checks, so 503 until they pass) and
// /metrics as NewRouter gives them, and 503 problem+json with detail on every
// other path.
func StartingRouter(logger *slog.Logger, reg *prometheus.Registry, detail string, checks ...Check) *chi.Mux {
	r := NewRouter(logger, reg, checks...)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		writeProblem(w, req, KindUnavailable, detail, nil)
	})
	return r
}
