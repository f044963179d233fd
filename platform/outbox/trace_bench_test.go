package outbox

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
)

// BenchmarkMessageTracing measures the relay's own work per message, without
// the database or the broker: building the AMQP message of a row and its send
// span. "bare" is the message as the relay built it before it had headers or
// spans; "off" is no SDK (no OTEL_* variable), for a row without and with a
// stored trace context; "on" records the span with the SDK and hands it to a
// batch span processor whose exporter drops it.
//
//	go test -run '^$' -bench BenchmarkMessageTracing -benchmem ./outbox
func BenchmarkMessageTracing(b *testing.B) {
	base := row{
		id: "01936f0e-4c2a-7b31-9a5d-2f4e8c1d7a60", eventName: contracts.EventOrderPlaced,
		routingKey: contracts.EventOrderPlaced, envelope: []byte(`{"event_id":"..."}`),
		occurredAt: time.Now(), producer: contracts.ProducerOrder, correlationID: "c-1",
		subject: "01936f0e-3a11-7c4e-8f20-5b6a9d0e1c32",
	}
	traced := base
	traced.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })

	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := []amqp.Message{{RoutingKey: base.routingKey, MessageID: base.id, Type: base.eventName,
				Body: base.envelope, Timestamp: base.occurredAt}}
			_ = m
		}
	})
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
		r    row
	}{
		{"off", tracenoop.NewTracerProvider(), base},
		{"off_stored_context", tracenoop.NewTracerProvider(), traced},
		{"on", sdk, traced},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := &Relay{tracer: c.tp.Tracer(tracerName), logger: testLogger(b)}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				msgs := []amqp.Message{message(c.r)}
				spans := r.startSends(ctx, contracts.Exchange, msgs)
				r.endSends(ctx, spans, msgs, 1, nil)
			}
		})
	}
}
