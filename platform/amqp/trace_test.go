package amqp

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestConsumerContinuesTheTraceOfEveryAttempt publishes a message with a
// traceparent whose handler fails every time: each attempt (the first, the
// retried copy) is handled in a CONSUMER span "process <queue>" that is a
// child of the message's traceparent, with the messaging attributes and the
// span in the handler's ctx; the retried and the dead-lettered copies keep
// the traceparent and tracestate.
func TestConsumerContinuesTheTraceOfEveryAttempt(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	q := topo.Queues[0]
	conn := dialTest(t, topo)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	const (
		traceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentSpan = "00f067aa0ba902b7"
		tp1        = "00-" + traceID + "-" + parentSpan + "-01"
		state      = "shop=1"
	)
	handled := make(chan trace.SpanContext, 4)
	startConsumer(t, conn, ConsumerConfig{
		Name: "test-consumer", Queue: q.Name, MaxAttempts: 2, RetryDelays: q.RetryDelays,
		DeadLetterQueue: q.DeadLetterQueue, TracerProvider: tp,
	}, func(ctx context.Context, d Delivery) error {
		handled <- trace.SpanContextFromContext(ctx)
		return errors.New("handler failed")
	})

	msg := messages(1, "traced")[0]
	msg.CorrelationID = "corr-9"
	msg.Headers["traceparent"] = tp1
	msg.Headers["tracestate"] = state
	publishAll(t, conn, topo.Exchange, []Message{msg})
	d := getOne(t, rawChannel(t), q.DeadLetterQueue, 20*time.Second)
	if d.Headers["traceparent"] != tp1 || d.Headers["tracestate"] != state {
		t.Errorf("dead-lettered copy: traceparent %v tracestate %v, want the message's", d.Headers["traceparent"], d.Headers["tracestate"])
	}

	for i := range 2 {
		sc := <-handled
		if sc.TraceID().String() != traceID || !sc.IsSampled() {
			t.Errorf("attempt %d: handler's span context %v, want trace %s, sampled", i+1, sc, traceID)
		}
	}
	// The last attempt's span ends once its dead-letter copy is confirmed and the
	// delivery acked, a moment after the copy can be read.
	var process []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(5 * time.Second); len(process) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		process = process[:0]
		for _, s := range spans.GetSpans().Snapshots() {
			if s.Name() == "process "+q.Name {
				process = append(process, s)
			}
		}
	}
	if len(process) != 2 {
		t.Fatalf("%d process spans, want one per attempt (2)", len(process))
	}
	for i, s := range process {
		if s.SpanKind() != trace.SpanKindConsumer || s.Parent().SpanID().String() != parentSpan || !s.Parent().IsRemote() ||
			s.SpanContext().TraceID().String() != traceID || s.SpanContext().TraceState().String() != state {
			t.Errorf("process span %d: kind %v parent %v trace %v state %q", i, s.SpanKind(), s.Parent(), s.SpanContext().TraceID(),
				s.SpanContext().TraceState())
		}
		attrs := attribute.NewSet(s.Attributes()...)
		// A retried copy comes back from its retry queue by dead-lettering,
		// which routes it with the queue's name.
		key := testKey
		if i > 0 {
			key = q.Name
		}
		for k, v := range map[string]string{
			"messaging.system":                           "rabbitmq",
			"messaging.operation.type":                   "process",
			"messaging.destination.name":                 q.Name,
			"messaging.rabbitmq.destination.routing_key": key,
			"messaging.message.id":                       msg.MessageID,
			"messaging.message.conversation_id":          "corr-9",
			"messaging.consumer.group.name":              "test-consumer",
		} {
			if got, _ := attrs.Value(attribute.Key(k)); got.AsString() != v {
				t.Errorf("process span %d: %s = %q, want %q", i, k, got.AsString(), v)
			}
		}
		if s.Status().Description != "handler failed" {
			t.Errorf("process span %d status %+v, want the handler's error", i, s.Status())
		}
	}
}

// TestHeaderCarrier reads only string headers.
func TestHeaderCarrier(t *testing.T) {
	c := HeaderCarrier{"traceparent": "x", "x-attempt": int32(2)}
	c.Set("tracestate", "y")
	if c.Get("traceparent") != "x" || c.Get("x-attempt") != "" || c.Get("tracestate") != "y" || len(c.Keys()) != 3 {
		t.Fatalf("carrier %v", c)
	}
}
