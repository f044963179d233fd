package outbox

import (
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
)

// row is what the relay reads of one outbox row to publish it.
type row struct {
	id, eventName, routingKey string
	envelope                  []byte
	occurredAt                time.Time
	// From the envelope: producer, correlation_id and the payload's
	// contracts.SubjectField ("" when absent).
	producer, correlationID, subject string
	// The stored trace context (trace_context column), "" when none.
	traceparent, tracestate string
}

// rowColumns selects, in the order of row's fields, what message needs.
const rowColumns = `id::text, event_name, routing_key, envelope::text, occurred_at,
	COALESCE(envelope->>'producer', ''), COALESCE(envelope->>'correlation_id', ''),
	COALESCE(envelope->'payload'->>'` + contracts.SubjectField + `', ''),
	COALESCE(trace_context->>'traceparent', ''), COALESCE(trace_context->>'tracestate', '')`

// scanArgs are the destinations of rowColumns.
func (r *row) scanArgs() []any {
	return []any{&r.id, &r.eventName, &r.routingKey, &r.envelope, &r.occurredAt,
		&r.producer, &r.correlationID, &r.subject, &r.traceparent, &r.tracestate}
}

// message is the AMQP message of one outbox row (docs/architecture.md, flow
// step 3): message_id = event_id, type = event_name, timestamp = occurred_at,
// correlation_id = the envelope's, body = the stored envelope; the CloudEvents
// headers of package contracts; and the row's stored traceparent and
// tracestate, which the relay's send span replaces with its own when spans are
// recorded (startSends).
func message(r row) amqp.Message {
	h := amqp091.Table{
		contracts.HeaderSpecVersion: contracts.CloudEventsSpecVersion,
		contracts.HeaderID:          r.id,
		contracts.HeaderSource:      contracts.CloudEventsSource(r.producer),
		contracts.HeaderType:        r.eventName,
		contracts.HeaderTime:        contracts.CloudEventsTime(r.occurredAt),
	}
	if r.subject != "" {
		h[contracts.HeaderSubject] = r.subject
	}
	if r.traceparent != "" {
		h[contracts.HeaderTraceparent] = r.traceparent
		if r.tracestate != "" {
			h[contracts.HeaderTracestate] = r.tracestate
		}
	}
	return amqp.Message{
		RoutingKey:    r.routingKey,
		MessageID:     r.id,
		Type:          r.eventName,
		CorrelationID: r.correlationID,
		Body:          r.envelope,
		Timestamp:     r.occurredAt,
		Headers:       h,
	}
}
