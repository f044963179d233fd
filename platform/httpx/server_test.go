package httpx_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"example.com/shop/platform/httpx"
)

func TestServeListenerGracefulShutdown(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	r, _, _ := newTestRouter(t)
	r.Get("/slow", func(w http.ResponseWriter, req *http.Request) {
		close(started)
		<-release
		if err := req.Context().Err(); err != nil {
			http.Error(w, "request context cancelled by shutdown", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "done")
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- httpx.ServeListener(ctx, ln, r, nil) }()

	type result struct {
		status int
		body   string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Get(url + "/slow")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{resp.StatusCode, string(b), err}
	}()

	<-started
	cancel()

	// Shutdown waits for the request in flight.
	select {
	case err := <-served:
		t.Fatalf("ServeListener returned %v while a request was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	res := <-got
	if res.err != nil || res.status != http.StatusOK || res.body != "done" {
		t.Errorf("in-flight request: status %d body %q err %v; want 200 done", res.status, res.body, res.err)
	}
	if err := <-served; err != nil {
		t.Errorf("ServeListener = %v, want nil after clean shutdown", err)
	}
}

func TestServeReturnsListenError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = httpx.Serve(context.Background(), ln.Addr().String(), http.NotFoundHandler(), nil)
	if err == nil {
		t.Fatal("Serve on a busy address returned nil")
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- httpx.Serve(ctx, "127.0.0.1:0", http.NotFoundHandler(), nil) }()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
}

// TestBound: a request's context ends d after it starts, and a handler waiting on it
// sees context.DeadlineExceeded.
func TestBound(t *testing.T) {
	var got error
	var left time.Duration
	h := httpx.Bound(50 * time.Millisecond)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline, _ := r.Context().Deadline()
		left = time.Until(deadline)
		<-r.Context().Done()
		got = r.Context().Err()
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if !errors.Is(got, context.DeadlineExceeded) || left <= 0 || left > 50*time.Millisecond {
		t.Errorf("the handler's context ended with %v, %v before its deadline; want DeadlineExceeded within 50 ms", got, left)
	}
}
