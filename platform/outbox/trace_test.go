package outbox

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"example.com/shop/contracts"
	"example.com/shop/platform/pg"
)

// writeTraced writes one placed event with the Writer in a transaction whose
// ctx is ctx, and returns its envelope.
func writeTraced(t *testing.T, ctx context.Context, pool pg.TxBeginner) contracts.Envelope {
	t.Helper()
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(v, contracts.ProducerOrder)
	var env contracts.Envelope
	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		orderID := uuid.New()
		env, err = w.Write(ctx, tx, contracts.EventOrderPlaced, orderID.String(), "corr-7", contracts.OrderPlaced{
			OrderID: orderID, CustomerID: uuid.New(), Version: 2,
			Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}},
		})
		return err
	})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	return env
}

// TestRelayPublishesACloudEventInTheWritersTrace writes an event inside a
// recorded span (as the order API does), relays it, and checks the message:
// its CloudEvents headers form a valid CloudEvent (checked with the
// CloudEvents SDK, binary content mode with the cloudEvents_ prefix), and its
// traceparent is that of a PRODUCER span "send <exchange>", child of the
// writer's span, with the messaging attributes.
func TestRelayPublishesACloudEventInTheWritersTrace(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))

	ctx, api := tp.Tracer("test").Start(t.Context(), "POST /orders/{id}/place", trace.WithSpanKind(trace.SpanKindServer))
	env := writeTraced(t, ctx, pool)
	api.End()
	var stored string
	if err := pool.QueryRow(t.Context(), `SELECT trace_context->>'traceparent' FROM outbox WHERE id = $1`, env.EventID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := "00-" + api.SpanContext().TraceID().String() + "-" + api.SpanContext().SpanID().String() + "-01"; stored != want {
		t.Fatalf("stored traceparent %q, want the writer's span %q", stored, want)
	}

	pub := newPublisher(t, topo)
	r, err := NewRelay(pool, func() Publisher { return pub }, fastConfig(), testLogger(t), prometheus.NewRegistry(), WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	start(t, testRelay{Relay: r})
	d := receive(t, in, 1)[0]

	// CloudEvents: the headers, read as the SDK reads a binary-mode message.
	want := map[string]string{
		contracts.HeaderSpecVersion: "1.0",
		contracts.HeaderID:          env.EventID.String(),
		contracts.HeaderSource:      "/order",
		contracts.HeaderType:        contracts.EventOrderPlaced,
		contracts.HeaderTime:        env.OccurredAt.UTC().Format("2006-01-02T15:04:05.000Z"),
		contracts.HeaderSubject:     mustPayload(t, env).OrderID.String(),
	}
	for k, v := range want {
		if got, _ := d.Headers[k].(string); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	ev := cloudEvent(t, d)
	if err := ev.Validate(); err != nil {
		t.Fatalf("the headers are not a valid CloudEvent: %v", err)
	}
	if ev.ID() != env.EventID.String() || ev.Source() != "/order" || ev.Type() != contracts.EventOrderPlaced ||
		!ev.Time().Equal(env.OccurredAt) || ev.Subject() != want[contracts.HeaderSubject] || len(ev.Extensions()) != 0 {
		t.Errorf("CloudEvent %s, want the envelope's attributes and no extension", ev)
	}
	if d.CorrelationId != "corr-7" {
		t.Errorf("correlation_id %q, want the envelope's", d.CorrelationId)
	}

	// Trace: the send span, and the traceparent that names it.
	// The span ends once the relay has read the broker's confirm, which can
	// come after the delivery the test just received.
	var send sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(10 * time.Second); send == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range spans.GetSpans().Snapshots() {
			if s.Name() == "send "+topo.Exchange {
				send = s
			}
		}
	}
	if send == nil {
		t.Fatalf("no span %q among %v", "send "+topo.Exchange, spanNames(spans))
	}
	if send.SpanKind() != trace.SpanKindProducer || send.Parent().SpanID() != api.SpanContext().SpanID() ||
		send.SpanContext().TraceID() != api.SpanContext().TraceID() {
		t.Errorf("send span: kind %v parent %v trace %v, want a producer child of %v", send.SpanKind(), send.Parent().SpanID(),
			send.SpanContext().TraceID(), api.SpanContext())
	}
	attrs := attribute.NewSet(send.Attributes()...)
	for k, v := range map[string]string{
		"messaging.system":                           "rabbitmq",
		"messaging.operation.type":                   "send",
		"messaging.destination.name":                 topo.Exchange,
		"messaging.rabbitmq.destination.routing_key": contracts.EventOrderPlaced,
		"messaging.message.id":                       env.EventID.String(),
		"messaging.message.conversation_id":          "corr-7",
	} {
		if got, _ := attrs.Value(attribute.Key(k)); got.AsString() != v {
			t.Errorf("send span attribute %s = %q, want %q", k, got.AsString(), v)
		}
	}
	wantTP := "00-" + send.SpanContext().TraceID().String() + "-" + send.SpanContext().SpanID().String() + "-01"
	if got, _ := d.Headers[contracts.HeaderTraceparent].(string); got != wantTP {
		t.Errorf("traceparent header %q, want the send span's %q", got, wantTP)
	}
}

// TestRelayPropagatesWithoutExporting relays an event written under a remote
// trace context with no SDK at all (a no-op tracer provider, as without any
// OTEL_* variable): the row keeps the context and the message carries it.
func TestRelayPropagatesWithoutExporting(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled, Remote: true,
	})
	// What otelhttp leaves in the request's context without an SDK.
	ctx, _ := tracenoop.NewTracerProvider().Tracer("").Start(trace.ContextWithRemoteSpanContext(t.Context(), sc), "POST")
	writeTraced(t, ctx, pool)
	writeTraced(t, t.Context(), pool) // not traced: no column, no header

	pub := newPublisher(t, topo)
	r, err := NewRelay(pool, func() Publisher { return pub }, fastConfig(), testLogger(t), prometheus.NewRegistry(), WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		t.Fatal(err)
	}
	start(t, testRelay{Relay: r})
	got := receive(t, in, 2)
	if tp, _ := got[0].Headers[contracts.HeaderTraceparent].(string); tp != incoming {
		t.Errorf("traceparent %q, want the incoming %q", tp, incoming)
	}
	if tp, ok := got[1].Headers[contracts.HeaderTraceparent]; ok {
		t.Errorf("untraced event has traceparent %v", tp)
	}
	var nulls int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE trace_context IS NULL`).Scan(&nulls); err != nil || nulls != 1 {
		t.Errorf("%d rows without trace_context (%v), want the untraced one", nulls, err)
	}
}

// cloudEvent reads d's cloudEvents_* headers as the CloudEvents SDK reads
// the attributes of a binary-mode message, with d's content type and body.
func cloudEvent(t *testing.T, d amqp091.Delivery) event.Event {
	t.Helper()
	vs := spec.WithPrefix(contracts.HeaderCloudEventsPrefix)
	sv, _ := d.Headers[vs.PrefixedSpecVersionName()].(string)
	v := vs.Version(sv)
	if v == nil {
		t.Fatalf("header %s = %q: not a CloudEvents version", vs.PrefixedSpecVersionName(), sv)
	}
	ec := v.NewContext()
	for k, val := range d.Headers {
		if !strings.HasPrefix(strings.ToLower(k), strings.ToLower(vs.Prefix())) || strings.EqualFold(k, vs.PrefixedSpecVersionName()) {
			continue
		}
		if err := v.SetAttribute(ec, k, val); err != nil {
			t.Fatalf("header %s = %v: %v", k, val, err)
		}
	}
	ev := event.Event{Context: ec}
	if err := ev.SetData(d.ContentType, d.Body); err != nil {
		t.Fatal(err)
	}
	return ev
}

func mustPayload(t *testing.T, env contracts.Envelope) contracts.OrderPlaced {
	t.Helper()
	var p contracts.OrderPlaced
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func spanNames(e *tracetest.InMemoryExporter) []string {
	var names []string
	for _, s := range e.GetSpans() {
		names = append(names, s.Name)
	}
	return names
}
