// Package contracts is the shared event contract between the shop's services: the routing names
// on the broker, the event envelope and payload types, and the embedded JSON Schemas (draft
// 2020-12, in schemas/) that producers and consumers validate every event body against.
//
// A producer builds an event with [NewEnvelope], checks the marshalled body with
// [Validator.Validate] before it writes the outbox row, and publishes it with the event name as
// routing key. A consumer checks and decodes a received body with [Validator.Decode]. A body that
// fails is reported as a [*ValidationError] naming the offending field, for example
// "payload.lines[0].quantity: does not match pattern"; such a message can never succeed and
// belongs in the dead-letter queue at once (docs/architecture.md, rule 3).
//
// The package imports neither platform/ nor services/.
package contracts

//go:generate go run ./internal/genevents

// Broker names shared by the relay (publisher) and the consumers (docs/architecture.md, "The flow").
const (
	// Exchange is the durable topic exchange every event is published to; the routing key is
	// the event name.
	Exchange = "app.events"
	// AlternateExchange is the alternate exchange of [Exchange]: it receives messages that no
	// queue binding matches, so they are kept rather than silently dropped.
	AlternateExchange = "app.events.alternate"
	// UnroutableQueue is bound to [AlternateExchange] and holds the unroutable messages.
	UnroutableQueue = "app.events.unroutable"
	// DeadLetterExchange receives messages rejected by a consumer; each dead-letter queue is
	// bound to it by its own name.
	DeadLetterExchange = "app.events.dlx"

	// QueueStock is the stock service's durable quorum queue.
	QueueStock = "stock.events"
	// QueueStockDLQ is the dead-letter queue of [QueueStock].
	QueueStockDLQ = "stock.events.dlq"
	// QueueShipping is the shipping service's durable quorum queue.
	QueueShipping = "shipping.events"
	// QueueShippingDLQ is the dead-letter queue of [QueueShipping].
	QueueShippingDLQ = "shipping.events.dlq"
	// QueueOrder is the order service's durable quorum queue: stock's answers to placed
	// orders ([ConsumerOrder]).
	QueueOrder = "order.events"
	// QueueOrderDLQ is the dead-letter queue of [QueueOrder].
	QueueOrderDLQ = "order.events.dlq"
)

// RejectionInsufficientStock is the reason of [EventStockReservationRejected] and of an
// order's rejection: a tracked product had less available than a line requested.
const RejectionInsufficientStock = "insufficient_stock"

// Envelope metadata values.
const (
	// ProducerOrder is the producer name of events written by the order service.
	ProducerOrder = "order"
	// ProducerStock is the producer name of events written by the stock service.
	ProducerStock = "stock"
	// SchemaVersion is the envelope schema version set by [NewEnvelope].
	SchemaVersion = 1
)
