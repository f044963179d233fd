package contracts

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// occurredAtLayout is the wire form of Envelope.OccurredAt: RFC 3339, UTC, exactly three
// fraction digits.
const occurredAtLayout = "2006-01-02T15:04:05.000Z"

// Envelope is the JSON body of every event message (schemas in contracts/schemas). It is checked against
// schemas/envelope.json, and Payload against schemas/<EventName>.json.
type Envelope struct {
	// EventID is a UUID v7 set by the producer when it writes the outbox row, never on receipt.
	// It is the outbox row id, the AMQP message_id and the consumers' deduplication key.
	EventID uuid.UUID `json:"event_id"`
	// EventName is one of [EventNames]; it is also the routing key.
	EventName string `json:"event_name"`
	// OccurredAt is when the business fact happened, at millisecond precision. It is marshalled
	// in UTC as "2006-01-02T15:04:05.000Z" and unmarshalled into UTC.
	OccurredAt time.Time `json:"occurred_at"`
	// Producer names the producing service, e.g. [ProducerOrder].
	Producer string `json:"producer"`
	// SchemaVersion is the envelope schema version, [SchemaVersion] for new envelopes.
	SchemaVersion int `json:"schema_version"`
	// CorrelationID ties together every event and log line caused by one request.
	CorrelationID string `json:"correlation_id"`
	// Payload holds the event data exactly as received or marshalled; decode it into the type
	// named by the event, e.g. [OrderPlaced].
	Payload json.RawMessage `json:"payload"`
}

// envelopeJSON has Envelope's fields without its methods, so UnmarshalJSON can reuse the
// default decoding.
type envelopeJSON Envelope

// MarshalJSON encodes the envelope with OccurredAt in UTC with exactly three fraction digits,
// as schemas/envelope.json requires. A nil Payload is encoded as null, which the schema rejects.
func (e Envelope) MarshalJSON() ([]byte, error) {
	return json.Marshal(e.Wire())
}

// Wire is an envelope as it is encoded: its fields in schema order, OccurredAt as its wire
// string, and Payload as any value encoding/json encodes. A producer that sets Payload to its
// payload struct encodes the whole event in one pass, with no intermediate payload bytes.
type Wire struct {
	EventID       uuid.UUID `json:"event_id"`
	EventName     string    `json:"event_name"`
	OccurredAt    string    `json:"occurred_at"`
	Producer      string    `json:"producer"`
	SchemaVersion int       `json:"schema_version"`
	CorrelationID string    `json:"correlation_id"`
	Payload       any       `json:"payload"`
}

// Wire returns e's wire form, with e.Payload as its payload.
func (e Envelope) Wire() Wire {
	return Wire{EventID: e.EventID, EventName: e.EventName, OccurredAt: CloudEventsTime(e.OccurredAt),
		Producer: e.Producer, SchemaVersion: e.SchemaVersion, CorrelationID: e.CorrelationID, Payload: e.Payload}
}

// UnmarshalJSON decodes an envelope, accepting any RFC 3339 occurred_at and converting it to
// UTC. It does not validate; use [Validator.Decode] for bodies from outside the process.
func (e *Envelope) UnmarshalJSON(data []byte) error {
	var v envelopeJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	v.OccurredAt = v.OccurredAt.UTC()
	*e = Envelope(v)
	return nil
}

// NewEnvelope builds the envelope of a new event: a fresh UUID v7 event id, occurred_at = now
// truncated to milliseconds in UTC, schema version [SchemaVersion], and payload marshalled with
// encoding/json (a json.RawMessage is kept as is). It does not validate the result; producers
// pass the marshalled envelope to [Validator.Validate] before writing it (docs/architecture.md, rule 1).
//
// It returns an error wrapping [ErrUnknownEvent] when eventName is not one of [EventNames], and
// an error when the id cannot be generated or the payload cannot be marshalled.
func NewEnvelope(eventName, producer, correlationID string, payload any, now time.Time) (Envelope, error) {
	if !knownEvent(eventName) {
		return Envelope{}, fmt.Errorf("new envelope: %q: %w", eventName, ErrUnknownEvent)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Envelope{}, fmt.Errorf("new envelope %s: generate event id: %w", eventName, err)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return Envelope{}, fmt.Errorf("new envelope %s: marshal payload: %w", eventName, err)
	}
	return Envelope{
		EventID:       id,
		EventName:     eventName,
		OccurredAt:    now.UTC().Truncate(time.Millisecond),
		Producer:      producer,
		SchemaVersion: SchemaVersion,
		CorrelationID: correlationID,
		Payload:       body,
	}, nil
}

// OrderLine is one line of an order payload.
type OrderLine struct {
	// ProductID identifies the product.
	ProductID uuid.UUID `json:"product_id"`
	// Quantity is a decimal string greater than zero with at most 9 integer digits and at most
	// 3 fraction digits, such as "2.000"; it is a string so no precision is lost on the way.
	Quantity string `json:"quantity"`
}

// OrderPlaced is the payload of [EventOrderPlaced] (schemas/order.order.placed.v1.json).
type OrderPlaced struct {
	// OrderID identifies the order.
	OrderID uuid.UUID `json:"order_id"`
	// CustomerID identifies the customer who owns the order.
	CustomerID uuid.UUID `json:"customer_id"`
	// Lines are the ordered products; never empty.
	Lines []OrderLine `json:"lines"`
	// Version is the order's version after the change (>= 1); consumers apply only newer
	// versions (docs/architecture.md, rule 4).
	Version int `json:"version"`
}

// OrderCancelled is the payload of [EventOrderCancelled]
// (schemas/order.order.cancelled.v1.json); its fields mean the same as in [OrderPlaced].
type OrderCancelled struct {
	// OrderID identifies the order.
	OrderID uuid.UUID `json:"order_id"`
	// CustomerID identifies the customer who owns the order.
	CustomerID uuid.UUID `json:"customer_id"`
	// Lines are the order's products; never empty.
	Lines []OrderLine `json:"lines"`
	// Version is the order's version after the change (>= 1).
	Version int `json:"version"`
}

// OrderConfirmed is the payload of [EventOrderConfirmed] (schemas/order.order.confirmed.v1.json);
// its fields mean the same as in [OrderPlaced], Version being the confirmed order's.
type OrderConfirmed OrderPlaced

// OrderRejected is the payload of [EventOrderRejected] (schemas/order.order.rejected.v1.json):
// the order as in [OrderPlaced], and why stock refused it.
type OrderRejected struct {
	// OrderID identifies the order.
	OrderID uuid.UUID `json:"order_id"`
	// CustomerID identifies the customer who owns the order.
	CustomerID uuid.UUID `json:"customer_id"`
	// Lines are the order's products; never empty.
	Lines []OrderLine `json:"lines"`
	// Version is the order's version after the change (>= 1).
	Version int `json:"version"`
	// Rejection is stock's reason, as in [StockReservationRejected].
	Rejection Rejection `json:"rejection"`
}

// Rejection says why stock could not hold an order.
type Rejection struct {
	// Reason is [RejectionInsufficientStock].
	Reason string `json:"reason"`
	// Lines are the lines stock could not hold; never empty.
	Lines []ShortLine `json:"lines"`
}

// ShortLine is a line stock could not hold: a tracked product with less available than
// requested, when the order was decided.
type ShortLine struct {
	// ProductID identifies the product.
	ProductID uuid.UUID `json:"product_id"`
	// Requested is the line's quantity, a decimal string greater than zero ("7.000").
	Requested string `json:"requested"`
	// Available is what stock had free for it then: on hand minus held, a decimal string
	// zero or greater ("5.000").
	Available string `json:"available"`
}

// StockReservationConfirmed is the payload of [EventStockReservationConfirmed]
// (schemas/stock.reservation.confirmed.v1.json): stock holds every line of the order.
type StockReservationConfirmed struct {
	// OrderID identifies the order.
	OrderID uuid.UUID `json:"order_id"`
	// OrderVersion is the Version of the [OrderPlaced] this answers; order applies the
	// answer only while the order is still placed at that version.
	OrderVersion int `json:"order_version"`
	// Lines are the lines held, in the order's line order; never empty.
	Lines []OrderLine `json:"lines"`
}

// StockReservationRejected is the payload of [EventStockReservationRejected]
// (schemas/stock.reservation.rejected.v1.json): stock holds nothing for the order.
type StockReservationRejected struct {
	// OrderID identifies the order.
	OrderID uuid.UUID `json:"order_id"`
	// OrderVersion is the Version of the [OrderPlaced] this answers.
	OrderVersion int `json:"order_version"`
	// Reason is [RejectionInsufficientStock].
	Reason string `json:"reason"`
	// Lines are the short lines; never empty.
	Lines []ShortLine `json:"lines"`
}
