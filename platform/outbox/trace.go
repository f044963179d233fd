package outbox

import (
	"context"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/platform/amqp"
)

// tracerName is the instrumentation scope of the relay's spans.
const tracerName = "example.com/shop/platform/outbox"

// errNotConfirmed ends the send span of a message after the one that stopped
// its batch.
var errNotConfirmed = errors.New("not confirmed: an earlier message of the batch failed")

// startSends starts one PRODUCER span "send <exchange>" per message of a
// batch published to exchange, each a child of the trace context stored with
// its row (a root span when there is none), with the OpenTelemetry messaging
// attributes, and writes the span's traceparent and tracestate into the
// message's headers, so that consumers continue the trace (docs/architecture.md, "Tracing"). A span that is not
// recorded (no exporter, or not sampled) gets no attributes and leaves the
// stored context in the headers as it is: tracing off costs next to nothing.
func (r *Relay) startSends(ctx context.Context, exchange string, msgs []amqp.Message) []trace.Span {
	spans := make([]trace.Span, len(msgs))
	name := "send " + exchange
	prop := propagation.TraceContext{}
	for i := range msgs {
		m := &msgs[i]
		carrier := amqp.HeaderCarrier(m.Headers)
		parent := ctx
		if _, ok := m.Headers["traceparent"]; ok {
			parent = prop.Extract(ctx, carrier)
		}
		sctx, span := r.tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindProducer))
		if span.IsRecording() {
			span.SetAttributes(
				semconv.MessagingSystemRabbitMQ,
				semconv.MessagingOperationTypeSend,
				semconv.MessagingOperationName("send"),
				semconv.MessagingDestinationName(exchange),
				semconv.MessagingRabbitMQDestinationRoutingKey(m.RoutingKey),
				semconv.MessagingMessageID(m.MessageID),
			)
			if m.CorrelationID != "" {
				span.SetAttributes(semconv.MessagingMessageConversationID(m.CorrelationID))
			}
			prop.Inject(sctx, carrier)
		}
		spans[i] = span
	}
	return spans
}

// endSends ends the spans of startSends once the broker confirmed the first
// confirmed messages and err stopped the batch at the next one. At DEBUG it
// logs each confirmed message in its span, so that its trace_id finds it.
func (r *Relay) endSends(ctx context.Context, spans []trace.Span, msgs []amqp.Message, confirmed int, err error) {
	debug := r.logger.Enabled(ctx, slog.LevelDebug)
	for i, span := range spans {
		switch {
		case i < confirmed:
			if debug {
				r.logger.LogAttrs(trace.ContextWithSpan(ctx, span), slog.LevelDebug, "event published",
					slog.String("event_id", msgs[i].MessageID), slog.String("routing_key", msgs[i].RoutingKey))
			}
		case i == confirmed && err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		default:
			span.SetStatus(codes.Error, errNotConfirmed.Error())
		}
		span.End()
	}
}
