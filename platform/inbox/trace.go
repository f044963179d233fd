package inbox

import (
	"context"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the inbox's spans.
const tracerName = "example.com/shop/platform/inbox"

// Attributes of the inbox's spans.
const (
	// AttrConsumer is the inbox consumer of the "inbox <consumer>" span.
	AttrConsumer = attribute.Key("inbox.consumer")
	// AttrDuplicate is true on the inbox span of an event whose key was there.
	AttrDuplicate = attribute.Key("inbox.duplicate")
)

// WithTracerProvider makes the Inbox start its spans with tp instead of the
// global tracer provider (telemetry.Setup installs that one).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(i *Inbox) { i.tracer = tp.Tracer(tracerName) }
}

// defaultTracer is the Inbox's tracer unless WithTracerProvider gives one.
func defaultTracer() trace.Tracer { return otel.Tracer(tracerName) }

// startProcess starts the span "inbox <consumer>" of e: the processed_event
// transaction, including the wait for a group commit, as a child of the
// span in ctx (the consumer's process span).
func (i *Inbox) startProcess(ctx context.Context, e *event) (context.Context, trace.Span) {
	ctx, span := i.tracer.Start(ctx, i.spanName)
	if span.IsRecording() {
		span.SetAttributes(AttrConsumer.String(i.consumer.name), semconv.MessagingMessageID(e.key))
	}
	return ctx, span
}

// endSpan ends span with the outcome of the event.
func endSpan(span trace.Span, duplicate bool, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrDuplicate.Bool(duplicate))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// runHandler runs h over e in the span "handle <event name>", a child of the span
// in ctx.
func (i *Inbox) runHandler(ctx context.Context, tx pgx.Tx, e *event, h func(context.Context, pgx.Tx, *event) error) error {
	ctx, span := i.tracer.Start(ctx, "handle "+e.meta.EventName)
	defer span.End()
	if err := h(ctx, tx, e); err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return err
	}
	return nil
}
