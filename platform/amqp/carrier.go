package amqp

import (
	"context"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// HeaderCarrier lets an OpenTelemetry propagator read and write the W3C
// Trace Context (traceparent, tracestate) in a message's headers. Get returns
// "" for a missing header or one that is not a string.
type HeaderCarrier amqp091.Table

// Get returns the string header key.
func (c HeaderCarrier) Get(key string) string {
	s, _ := c[key].(string)
	return s
}

// Set sets header key to value.
func (c HeaderCarrier) Set(key, value string) { c[key] = value }

// Keys returns the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// tracerName is the instrumentation scope of the consumer's spans.
const tracerName = "example.com/shop/platform/amqp"

// startProcess starts the CONSUMER span of delivery d: "process <queue>", a
// child of the trace context in d's headers (a root span without one), with
// the OpenTelemetry messaging attributes when it is recorded.
func (c *Consumer) startProcess(ctx context.Context, d *amqp091.Delivery) (context.Context, trace.Span) {
	if _, ok := d.Headers["traceparent"]; ok {
		ctx = propagation.TraceContext{}.Extract(ctx, HeaderCarrier(d.Headers))
	}
	ctx, span := c.tracer.Start(ctx, c.spanName, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(
			semconv.MessagingSystemRabbitMQ,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"),
			semconv.MessagingDestinationName(c.cfg.Queue),
			semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey),
			semconv.MessagingMessageID(d.MessageId),
			semconv.MessagingConsumerGroupName(c.cfg.Name),
			semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)),
		)
		if d.CorrelationId != "" {
			span.SetAttributes(semconv.MessagingMessageConversationID(d.CorrelationId))
		}
	}
	return ctx, span
}
