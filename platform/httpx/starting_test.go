package httpx_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/httpx"
)

type dep struct{ err error }

func (d *dep) Ping(context.Context) error { return d.err }

func TestPendingFailsUntilConnected(t *testing.T) {
	var p atomic.Pointer[dep]
	check := httpx.Pending("db", &p, (*dep).Ping)
	if err := check.Fn(context.Background()); !errors.Is(err, httpx.ErrNotConnected) {
		t.Fatalf("before connect: %v, want ErrNotConnected", err)
	}
	p.Store(&dep{})
	if err := check.Fn(context.Background()); err != nil {
		t.Fatalf("connected: %v", err)
	}
	boom := errors.New("boom")
	p.Store(&dep{err: boom})
	if err := check.Fn(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("failing dependency: %v, want boom", err)
	}
}

func TestSwitchFromStartingRouterToFullRouter(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var p atomic.Pointer[dep]
	reg := prometheus.NewRegistry()
	check := httpx.Pending("db", &p, (*dep).Ping)
	sw := httpx.NewSwitch(httpx.StartingRouter(logger, reg, "starting", check))
	srv := httptest.NewServer(sw)
	defer srv.Close()

	status := func(path string) int {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("/healthz"); got != http.StatusOK {
		t.Fatalf("starting /healthz = %d, want 200", got)
	}
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("starting /readyz = %d, want 503", got)
	}
	if got := status("/things"); got != http.StatusServiceUnavailable {
		t.Fatalf("starting /things = %d, want 503", got)
	}

	p.Store(&dep{})
	if got := status("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("starting /readyz with every dependency there = %d, want 503 until the full router serves", got)
	}
	full := httpx.NewRouter(logger, reg, check)
	full.Get("/things", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	sw.Set(full)
	if got := status("/readyz"); got != http.StatusOK {
		t.Fatalf("connected /readyz = %d, want 200", got)
	}
	if got := status("/things"); got != http.StatusOK {
		t.Fatalf("connected /things = %d, want 200", got)
	}
}

// TestListenStartsThenServesTheReadyRouter: a Starting server answers /healthz and a
// 503 /readyz and 503 elsewhere before Ready, the full router after, and Serve returns
// nil once its context ends.
func TestListenStartsThenServesTheReadyRouter(t *testing.T) {
	t.Parallel()
	var p atomic.Pointer[dep]
	srv, err := httpx.Listen(t.Context(), "127.0.0.1:0", nil, prometheus.NewRegistry(), "starting", httpx.Pending("db", &p, (*dep).Ping))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	get := func(path string) int {
		t.Helper()
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503, "/things": 503} {
		if got := get(path); got != want {
			t.Errorf("starting: GET %s = %d, want %d", path, got, want)
		}
	}
	p.Store(&dep{})
	r := httpx.NewRouter(nil, prometheus.NewRegistry(), httpx.Pending("db", &p, (*dep).Ping))
	r.Get("/things", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv.Ready(r)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/things": http.StatusTeapot} {
		if got := get(path); got != want {
			t.Errorf("ready: GET %s = %d, want %d", path, got, want)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve = %v after cancel, want nil", err)
	}
	if _, err := httpx.Listen(t.Context(), srv.Addr()+"x", nil, prometheus.NewRegistry(), "starting"); err == nil {
		t.Error("Listen on a bad address succeeded")
	}
}

// TestStartingRun: Run returns nil when ctx ends while start waits, the loop's error
// when the loop fails, start's error when it fails, and stops serving in every case.
func TestStartingRun(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	listen := func(t *testing.T) *httpx.Starting {
		t.Helper()
		srv, err := httpx.Listen(t.Context(), "127.0.0.1:0", nil, prometheus.NewRegistry(), "starting")
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	t.Run("stopped while starting", func(t *testing.T) {
		srv := listen(t)
		ctx, cancel := context.WithCancel(t.Context())
		err := srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
			cancel()
			<-ctx.Done()
			return nil, ctx.Err()
		})
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	t.Run("start fails", func(t *testing.T) {
		err := listen(t).Run(t.Context(), func(context.Context) (func(context.Context) error, error) { return nil, boom })
		if !errors.Is(err, boom) {
			t.Errorf("Run = %v, want boom", err)
		}
	})
	t.Run("loop fails", func(t *testing.T) {
		srv := listen(t)
		err := srv.Run(t.Context(), func(context.Context) (func(context.Context) error, error) {
			return func(context.Context) error { return boom }, nil
		})
		if !errors.Is(err, boom) {
			t.Errorf("Run = %v, want boom", err)
		}
		if _, err := http.Get("http://" + srv.Addr() + "/healthz"); err == nil {
			t.Error("still serving after Run returned")
		}
	})
	t.Run("no loop serves until ctx ends", func(t *testing.T) {
		srv := listen(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- srv.Run(ctx, func(context.Context) (func(context.Context) error, error) {
				srv.Ready(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
				return nil, nil
			})
		}()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			resp, err := http.Get("http://" + srv.Addr() + "/x")
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusTeapot {
					break
				}
			}
			if time.Now().After(end) {
				t.Fatal("the ready handler never answered")
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}
