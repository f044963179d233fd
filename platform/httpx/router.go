package httpx

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/platform/metrics"
)

// ReadyTimeout bounds each readiness Check run by GET /readyz (2 s).
const ReadyTimeout = 2 * time.Second

// HeaderRequestID is the response header that echoes the request id.
const HeaderRequestID = "X-Request-Id"

// routeUnmatched is the route label of requests that matched no route, so that arbitrary
// paths never become metric labels.
const routeUnmatched = "unmatched"

// Check is one readiness probe run by GET /readyz, such as a database ping or
// amqp.Connection.Ready.
type Check struct {
	// Name identifies the check in the 503 problem and in logs, e.g. "postgres".
	Name string
	// Fn returns nil when the dependency is usable. Its context ends after ReadyTimeout.
	Fn func(ctx context.Context) error
}

// NewRouter returns a chi router with, outermost first: an OpenTelemetry SERVER span per
// request except the probes (otelhttp: it continues an incoming traceparent, and is named
// "<method> <route pattern>" once the route is known), request ids (chi's RequestID,
// echoed in the X-Request-Id response header and set on the span as the attribute
// http.response.header.x-request-id), request metrics and one log line per request (with
// the request id, trace_id and span_id), panic recovery answering a 500 problem, a MaxBodyBytes limit on request
// bodies, and HEAD answered by a path's GET handler without its body (chi's GetHead). It serves:
//   - GET /healthz: 200 {"status":"ok"} while the process runs;
//   - GET /readyz: runs every check concurrently, each bounded by ReadyTimeout; 200
//     {"status":"ready"} when all pass, else a 503 problem naming the failing checks
//     (their errors are logged, not sent);
//   - GET /metrics: reg in the Prometheus text format.
//
// Unknown paths and methods get 404 and 405 problems. Request metrics are registered on
// reg: http_requests_total and http_request_duration_seconds (seconds), labelled by
// method, route pattern and status. Calling NewRouter twice with one registry shares them.
//
// Callers add their routes to the returned mux; middleware for their routes goes through
// Group or With, since chi refuses Use after routes exist. A nil logger discards logs; a
// nil reg gets a private registry, so nothing is lost but nothing is shared either.
func NewRouter(logger *slog.Logger, reg *prometheus.Registry, checks ...Check) *chi.Mux {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := newRequestMetrics(reg)

	r := chi.NewRouter()
	r.Use(
		otelhttp.NewMiddleware("http",
			otelhttp.WithFilter(func(r *http.Request) bool { return !probe(r.URL.Path) }),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method })),
		middleware.RequestID,
		echoRequestID,
		observe(logger, m),
		recoverer(logger),
		limitBody,
		middleware.GetHead,
	)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		writeProblem(w, req, KindNotFound, "no resource at this path", nil)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		if allow := allowedMethods(r, req); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeProblem(w, req, KindMethodNotAllowed, fmt.Sprintf("method %s is not allowed here", req.Method), nil)
	})

	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", readyHandler(logger, checks))
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError),
		Registry: reg,
	}))
	return r
}

// AttrRequestID is the span attribute that holds the request id.
const AttrRequestID = attribute.Key("http.response.header.x-request-id")

// probe reports whether path is one of the health, readiness and metrics endpoints,
// which get no span.
func probe(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// echoRequestID copies the id set by middleware.RequestID into the response headers
// and onto the request's span.
func echoRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := middleware.GetReqID(r.Context()); id != "" {
			w.Header().Set(HeaderRequestID, id)
			trace.SpanFromContext(r.Context()).SetAttributes(AttrRequestID.StringSlice([]string{id}))
		}
		next.ServeHTTP(w, r)
	})
}

// limitBody caps every request body at MaxBodyBytes.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// recoverer turns a panic in a handler into a logged error and a 500 problem that reveals
// nothing of the panic. If the response had already started, the connection is aborted
// instead, so the client cannot take a truncated body for a complete one.
func recoverer(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				rec := recover()
				if rec == nil {
					return
				}
				if rec == http.ErrAbortHandler {
					panic(rec)
				}
				logger.ErrorContext(r.Context(), "http handler panic",
					slog.String("request_id", middleware.GetReqID(r.Context())),
					slog.String("method", r.Method),
					slog.String("path", r.URL.Path),
					slog.String("panic", fmt.Sprint(rec)),
					slog.String("stack", string(debug.Stack())),
				)
				if ww, ok := w.(middleware.WrapResponseWriter); ok && ww.Status() != 0 {
					panic(http.ErrAbortHandler)
				}
				writeProblem(w, r, KindInternal, "an unexpected error occurred", nil)
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// requestMetrics are the per-request collectors, shared by routers on one registry.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRequestMetrics(reg prometheus.Registerer) requestMetrics {
	labels := []string{"method", "route", "status"}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "http_requests_total",
		Help: "HTTP requests served, by method, route pattern and status code.",
	}, labels)
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "http_request_duration_seconds",
		Help:    "Time to serve HTTP requests in seconds, by method, route pattern and status code.",
		Buckets: prometheus.DefBuckets,
	}, labels)
	return requestMetrics{
		requests: registerOrExisting(reg, requests),
		duration: registerOrExisting(reg, duration),
	}
}

// registerOrExisting registers c on reg, or returns the identical collector registered
// before (metrics.Register), so that building a second router on one registry does not
// fail. A different collector with the same name is left unregistered rather than
// failing the router; the conflict is visible as missing series.
func registerOrExisting[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	c, _ = metrics.Register(reg, c)
	return c
}

// observe records the request metrics and writes one log line per request. Probe
// endpoints that succeed are logged at debug level, server errors at error level.
func observe(logger *slog.Logger, m requestMetrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			defer func() {
				elapsed := time.Since(start)
				status := ww.Status()
				if status == 0 {
					// Nothing written (or aborted before writing): net/http sends 200.
					status = http.StatusOK
				}
				route := routeUnmatched
				if rctx := chi.RouteContext(r.Context()); rctx != nil {
					if p := rctx.RoutePattern(); p != "" {
						route = p
					}
				}
				method := methodLabel(r.Method)
				if span := trace.SpanFromContext(r.Context()); span.IsRecording() && route != routeUnmatched {
					span.SetName(r.Method + " " + route)
					span.SetAttributes(semconv.HTTPRoute(route))
				}
				code := strconv.Itoa(status)
				m.requests.WithLabelValues(method, route, code).Inc()
				m.duration.WithLabelValues(method, route, code).Observe(elapsed.Seconds())

				// Probes are logged at debug level whatever their answer: a
				// failing readiness check is logged (warn) by the check itself,
				// and a 503 while a process starts is expected.
				level := slog.LevelInfo
				switch {
				case route == "/healthz" || route == "/readyz" || route == "/metrics":
					level = slog.LevelDebug
				case status >= 500:
					level = slog.LevelError
				}
				if !logger.Enabled(r.Context(), level) {
					return
				}
				logger.LogAttrs(r.Context(), level, "http request",
					slog.String("request_id", middleware.GetReqID(r.Context())),
					slog.String("method", r.Method),
					slog.String("path", r.URL.Path),
					slog.String("route", route),
					slog.Int("status", status),
					slog.Int("bytes", ww.BytesWritten()),
					slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
					slog.String("remote_addr", r.RemoteAddr),
				)
			}()
			next.ServeHTTP(ww, r)
		})
	}
}

// methodLabel keeps the method label set bounded.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	default:
		return "OTHER"
	}
}

// allowedMethods lists, for the Allow header of a 405, the methods mux routes for the
// request's path.
func allowedMethods(mux *chi.Mux, r *http.Request) string {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allowed []string
	for _, m := range []string{
		http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions,
	} {
		if mux.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
			if m == http.MethodGet {
				allowed = append(allowed, http.MethodHead) // GetHead
			}
		}
	}
	return strings.Join(allowed, ", ")
}

// readyHandler runs the checks concurrently, each bounded by ReadyTimeout, and answers
// 200 {"status":"ready"} or a 503 problem naming the checks that failed.
func readyHandler(logger *slog.Logger, checks []Check) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		failed := make([]bool, len(checks))
		var wg sync.WaitGroup
		for i, c := range checks {
			wg.Go(func() {
				if err := runCheck(r.Context(), c); err != nil {
					failed[i] = true
					logger.WarnContext(r.Context(), "readiness check failed",
						slog.String("check", c.Name), slog.Any("error", err))
				}
			})
		}
		wg.Wait()

		var names []string
		for i, f := range failed {
			if f {
				names = append(names, strconv.Quote(checks[i].Name))
			}
		}
		if len(names) == 0 {
			WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
			return
		}
		detail := "check " + names[0] + " failed"
		if len(names) > 1 {
			detail = "checks " + strings.Join(names, ", ") + " failed"
		}
		writeProblem(w, r, KindUnavailable, detail, nil)
	}
}

// runCheck runs c with a ReadyTimeout deadline. It returns when Fn returns or the deadline
// passes, whichever is first, so a check that ignores its context cannot hold /readyz; a
// panic in Fn counts as a failure.
func runCheck(ctx context.Context, c Check) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	if c.Fn == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if rec := recover(); rec != nil {
				done <- fmt.Errorf("check %s panicked: %v", c.Name, rec)
			}
		}()
		done <- c.Fn(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("check %s: %w", c.Name, ctx.Err())
	}
}
