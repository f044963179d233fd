package httpx_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"example.com/shop/platform/httpx"
	"example.com/shop/testkit"
)

var errGone = errors.New("gone")

type outage struct{}

func (outage) Error() string { return "connection refused" }

// Errors.Write decides every answer: a *httpx.Error as it says, then the rules in
// order, then a cancelled request, then 500 without the cause.
func TestErrorsWrite(t *testing.T) {
	t.Parallel()
	logger, logs := testkit.Logger(t)
	errs := httpx.NewErrors(logger,
		httpx.Rule{Is: errGone, Kind: httpx.KindNotFound, Detail: "no item has this id"},
		httpx.Rule{Match: func(err error) bool { return errors.As(err, new(outage)) }, Kind: httpx.KindUnavailable,
			Detail: "the item database is unavailable", RetryAfter: 1500 * time.Millisecond},
	)
	tests := []struct {
		name       string
		err        error
		kind       httpx.Kind
		detail     string
		retryAfter string
		logged     string
	}{
		{"httpx error", fmt.Errorf("create: %w", httpx.Invalid("bad lines", httpx.FieldError{Pointer: "/lines/0/qty", Detail: "must be positive"})),
			httpx.KindValidation, "bad lines", "", ""},
		{"sentinel", fmt.Errorf("get item 7: %w", errGone), httpx.KindNotFound, "no item has this id", "", ""},
		{"match", fmt.Errorf("get item 7: %w", outage{}), httpx.KindUnavailable, "the item database is unavailable", "2", "connection refused"},
		{"unexpected", errors.New("secret table xyz broke"), httpx.KindInternal, "an unexpected error occurred", "", "secret table xyz broke"},
		{"kind without detail", &httpx.Error{Kind: httpx.KindConflict}, httpx.KindConflict, httpx.KindConflict.Title(), "", ""},
	}
	for _, tt := range tests {
		r, _, _ := newTestRouter(t)
		r.Get("/items/7", errs.Handle(func(http.ResponseWriter, *http.Request) error { return tt.err }))
		rec := do(t, r, http.MethodGet, "/items/7", nil)
		if rec.Code != tt.kind.Status() {
			t.Errorf("%s: status %d, want %d", tt.name, rec.Code, tt.kind.Status())
			continue
		}
		p := decodeProblem(t, rec)
		if p.Type != httpx.ProblemTypeBase+string(tt.kind) || p.Detail != tt.detail || p.Instance != "/items/7" {
			t.Errorf("%s: problem %+v", tt.name, p)
		}
		if strings.Contains(rec.Body.String(), "secret") {
			t.Errorf("%s: body leaks the cause: %s", tt.name, rec.Body)
		}
		if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", tt.name, got, tt.retryAfter)
		}
		if tt.logged != "" && !strings.Contains(logs.String(), tt.logged) {
			t.Errorf("%s: cause %q not logged", tt.name, tt.logged)
		}
	}
	r, _, _ := newTestRouter(t)
	r.Get("/items/7", errs.Handle(func(http.ResponseWriter, *http.Request) error { return nil }))
	if rec := do(t, r, http.MethodGet, "/items/7", nil); rec.Code != http.StatusOK {
		t.Errorf("a handler that answered and returned nil: status %d", rec.Code)
	}
}

// A request whose client went away answers 503 and logs no warning.
func TestErrorsWriteCancelled(t *testing.T) {
	t.Parallel()
	logger, logs := testkit.Logger(t)
	errs := httpx.NewErrors(logger)
	h := errs.Handle(func(_ http.ResponseWriter, r *http.Request) error {
		<-r.Context().Done()
		return fmt.Errorf("query: %w", r.Context().Err())
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/items/7", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	if strings.Contains(logs.String(), "WARN") || strings.Contains(logs.String(), "ERROR") {
		t.Errorf("a client that went away is logged as a failure: %s", logs.String())
	}
}

// Every kind has its own type URI, a title and a client or server error status.
func TestKinds(t *testing.T) {
	t.Parallel()
	kinds := []httpx.Kind{httpx.KindInvalidRequest, httpx.KindValidation, httpx.KindIdempotencyKeyReused,
		httpx.KindNotFound, httpx.KindMethodNotAllowed, httpx.KindConflict, httpx.KindBodyTooLarge,
		httpx.KindUnsupportedMediaType, httpx.KindUnavailable, httpx.KindInternal}
	seen := map[string]bool{}
	for _, k := range kinds {
		if seen[k.Type()] || k.Title() == "" || k.Status() < 400 || (k != httpx.KindInternal && k.Status() == 500) {
			t.Errorf("kind %q: type %q title %q status %d", k, k.Type(), k.Title(), k.Status())
		}
		seen[k.Type()] = true
	}
	if got := httpx.Kind("made-up").Type(); got != httpx.KindInternal.Type() {
		t.Errorf("unknown kind has type %q", got)
	}
}
