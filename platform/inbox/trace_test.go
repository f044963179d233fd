package inbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/testkit"
)

// TestProcessSpans processes events concurrently, each under a span of its
// own (the consumer's process span), alone and with group commit: every event
// gets a span "inbox <consumer>" below its own span, and its handler a span
// "handle <event name>" below that, also when it shares a transaction with
// others; a duplicate's inbox span says so and has no handler span.
func TestProcessSpans(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]inbox.Option{
		"alone": nil,
		"group": {inbox.WithGroupCommit(8, 1)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool, _ := testkit.NewDatabase(t, testSchema)
			v, err := contracts.NewValidator()
			if err != nil {
				t.Fatal(err)
			}
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			ib := inbox.New(pool, "tracing", v, nil, nil, append(opts, inbox.WithTracerProvider(tp))...)
			inbox.On(ib, contracts.EventOrderPlaced, func(ctx context.Context, _ pgx.Tx, env inbox.Meta, _ contracts.OrderPlaced) error {
				time.Sleep(5 * time.Millisecond) // let the others queue up for a group
				return nil
			})

			const n = 6
			parents := make(map[uuid.UUID]trace.SpanContext, n)
			envs := make([]contracts.Envelope, n)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range envs {
				env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "c",
					contracts.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
						Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}}}, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				envs[i] = env
				wg.Go(func() {
					ctx, span := tp.Tracer("test").Start(t.Context(), "process")
					defer span.End()
					mu.Lock()
					parents[env.EventID] = span.SpanContext()
					mu.Unlock()
					if _, err := ib.Process(ctx, env); err != nil {
						t.Errorf("process: %v", err)
					}
				})
			}
			wg.Wait()
			ctx, again := tp.Tracer("test").Start(t.Context(), "again")
			if dup, err := ib.Process(ctx, envs[0]); err != nil || !dup {
				t.Fatalf("second process: duplicate %v, %v", dup, err)
			}
			again.End()

			byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			for _, s := range spans.GetSpans().Snapshots() {
				byID[s.SpanContext().SpanID()] = s
			}
			handled := 0
			for _, s := range byID {
				switch s.Name() {
				case "inbox tracing":
					attrs := attribute.NewSet(s.Attributes()...)
					id, _ := attrs.Value("messaging.message.id")
					dup, _ := attrs.Value(inbox.AttrDuplicate)
					parent := byID[s.Parent().SpanID()]
					want := parents[uuid.MustParse(id.AsString())]
					if dup.AsBool() {
						want = again.SpanContext()
					}
					if parent == nil || parent.SpanContext().SpanID() != want.SpanID() {
						t.Errorf("inbox span of %s (duplicate %v): parent %v, want %v", id.AsString(), dup.AsBool(), s.Parent().SpanID(), want.SpanID())
					}
				case "handle " + contracts.EventOrderPlaced:
					handled++
					if parent := byID[s.Parent().SpanID()]; parent == nil || parent.Name() != "inbox tracing" {
						t.Errorf("handler span's parent is %v, want an inbox span", parent)
					}
				}
			}
			if handled != n {
				t.Errorf("%d handler spans, want %d (none for the duplicate)", handled, n)
			}
		})
	}
}
