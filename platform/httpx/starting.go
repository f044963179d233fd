package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
// dependencies: /healthz and /metrics as NewRouter gives them, /readyz running
// checks and a "started" check that always fails with detail (a process is not
// ready before its own routes serve, however many dependencies already answer),
// and 503 problem+json with detail on every other path.
func StartingRouter(logger *slog.Logger, reg *prometheus.Registry, detail string, checks ...Check) *chi.Mux {
	starting := errors.New(detail)
	checks = append(slices.Clip(checks), Check{Name: "started", Fn: func(context.Context) error { return starting }})
	r := NewRouter(logger, reg, checks...)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		writeProblem(w, req, KindUnavailable, detail, nil)
	})
	return r
}

// Starting is the HTTP server of a process that listens before its dependencies
// are there: it answers /healthz, /readyz (503 until Ready) and
// /metrics at once, 503 on every other path, and the process's full router from
// Ready on. Ready is safe to call while Serve runs.
type Starting struct {
	ln     net.Listener
	sw     *Switch
	logger *slog.Logger
}

// Listen opens the TCP address addr (":8082", "127.0.0.1:0") and returns a
// Starting that serves StartingRouter(logger, reg, detail, checks...) until
// Ready. A listen failure is returned wrapped with the address; nothing is
// served until Serve runs.
func Listen(ctx context.Context, addr string, logger *slog.Logger, reg *prometheus.Registry, detail string, checks ...Check) (*Starting, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http listen %s: %w", addr, err)
	}
	return &Starting{ln: ln, sw: NewSwitch(StartingRouter(logger, reg, detail, checks...)), logger: logger}, nil
}

// Addr returns the address the server listens on, with the port chosen for ":0".
func (s *Starting) Addr() string { return s.ln.Addr().String() }

// Ready makes h, the process's full router, serve every request from now on.
func (s *Starting) Ready(h http.Handler) { s.sw.Set(h) }

// Serve serves until ctx ends, then shuts down gracefully, as ServeListener
// does (timeouts, ShutdownTimeout), and returns its result.
func (s *Starting) Serve(ctx context.Context) error {
	return ServeListener(ctx, s.ln, s.sw, s.logger)
}

// Run is a process's life cycle around s: it serves while start, called at once,
// connects the dependencies, calls Ready and returns the process's main loop (nil
// for none: the process then serves until ctx ends). Whichever part stops first
// stops the others: a server failure cancels start and the loop, the loop's end
// shuts the server down within ShutdownTimeout. It returns nil after a clean
// shutdown, also when ctx ends while start still waits for a dependency, and
// otherwise the errors of start or the loop and of the server, joined.
func (s *Starting) Run(ctx context.Context, start func(ctx context.Context) (loop func(context.Context) error, err error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- s.Serve(ctx)
		cancel() // a server failure stops the rest too
	}()
	loop, err := start(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		err = nil // stopped while starting: a clean shutdown, unless the server failed
	case err == nil && loop != nil:
		err = loop(ctx)
	case err == nil:
		<-ctx.Done()
	}
	cancel()
	return errors.Join(err, <-served)
}

// Routes returns a service's HTTP handler once its database is connected: its own
// routes over pool, with /healthz, /metrics (reg) and /readyz (checks, the serve
// command's readiness checks) as NewRouter serves them.
type Routes func(pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []Check) http.Handler
