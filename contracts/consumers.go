package contracts

import "slices"

// Consumer names, the `consumer` column of each consuming service's processed_event and
// dead_letter tables.
const (
	// ConsumerStock is the stock service's consumer: it reserves stock for placed orders.
	ConsumerStock = "stock"
	// ConsumerShipping is the shipping service's consumer: it keeps order_status and shipments.
	ConsumerShipping = "shipping"
)

// Consumer describes one consuming service on the broker: the queue it reads, its dead-letter
// queue and the events (routing keys) bound to its queue. It is the topology every consumer
// declares and the auditor checks against: an event published to [Exchange] must reach every
// consumer whose Events holds its name.
type Consumer struct {
	// Name is the consumer name, e.g. [ConsumerStock].
	Name string
	// Queue is its durable quorum queue, e.g. [QueueStock].
	Queue string
	// DeadLetterQueue is the dead-letter queue of Queue, e.g. [QueueStockDLQ].
	DeadLetterQueue string
	// Events are the event names bound to Queue as routing keys.
	Events []string
}

// Receives reports whether the consumer's queue is bound to eventName.
func (c Consumer) Receives(eventName string) bool {
	return slices.Contains(c.Events, eventName)
}

// Consumers returns every consumer of the contract's events, in a fresh slice the caller may
// modify: stock and shipping, each receiving both order events.
func Consumers() []Consumer {
	return []Consumer{
		{Name: ConsumerStock, Queue: QueueStock, DeadLetterQueue: QueueStockDLQ, Events: EventNames()},
		{Name: ConsumerShipping, Queue: QueueShipping, DeadLetterQueue: QueueShippingDLQ, Events: EventNames()},
	}
}

// ConsumersOf returns the consumers that receive eventName, in the order of [Consumers]; none
// for an unknown event.
func ConsumersOf(eventName string) []Consumer {
	var out []Consumer
	for _, c := range Consumers() {
		if c.Receives(eventName) {
			out = append(out, c)
		}
	}
	return out
}

// ConsumerNamed returns the consumer of [Consumers] called name, and false when the
// contract has none.
func ConsumerNamed(name string) (Consumer, bool) {
	for _, c := range Consumers() {
		if c.Name == name {
			return c, true
		}
	}
	return Consumer{}, false
}
