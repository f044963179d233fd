package contracts_test

import (
	"slices"
	"strings"
	"testing"

	"example.com/shop/contracts"
)

func TestEveryEventHasConsumersWithDistinctQueues(t *testing.T) {
	queues := map[string]bool{}
	for _, c := range contracts.Consumers() {
		if c.Name == "" || c.Queue == "" || c.DeadLetterQueue == "" || len(c.Events) == 0 {
			t.Errorf("incomplete consumer %+v", c)
		}
		if queues[c.Queue] || queues[c.DeadLetterQueue] {
			t.Errorf("consumer %s shares a queue", c.Name)
		}
		queues[c.Queue], queues[c.DeadLetterQueue] = true, true
	}
	want := map[string][]string{ // each consumer's events are listed by name, never "all events"
		contracts.EventOrderPlaced:               {contracts.ConsumerStock, contracts.ConsumerShipping},
		contracts.EventOrderCancelled:            {contracts.ConsumerStock, contracts.ConsumerShipping},
		contracts.EventOrderConfirmed:            {contracts.ConsumerShipping},
		contracts.EventOrderRejected:             {contracts.ConsumerShipping},
		contracts.EventStockReservationConfirmed: nil, // order's consumer, not yet among Consumers
		contracts.EventStockReservationRejected:  nil,
	}
	for _, e := range contracts.EventNames() {
		var got []string
		for _, c := range contracts.ConsumersOf(e) {
			got = append(got, c.Name)
		}
		if !slices.Equal(got, want[e]) {
			t.Errorf("ConsumersOf(%s) = %v, want %v", e, got, want[e])
		}
	}
	// No service receives its own events.
	producers := map[string]string{contracts.ConsumerStock: "stock.", contracts.ConsumerOrder: "order."}
	for _, c := range append(contracts.Consumers(), contracts.OrderConsumer()) {
		for _, e := range c.Events {
			if p, ok := producers[c.Name]; ok && strings.HasPrefix(e, p) {
				t.Errorf("consumer %s receives its own event %s", c.Name, e)
			}
		}
	}
	if o := contracts.OrderConsumer(); o.Queue != contracts.QueueOrder || o.DeadLetterQueue != contracts.QueueOrderDLQ ||
		!slices.Equal(o.Events, []string{contracts.EventStockReservationConfirmed, contracts.EventStockReservationRejected}) {
		t.Errorf("OrderConsumer() = %+v", o)
	}
	if got := contracts.ConsumersOf("order.order.unknown.v1"); len(got) != 0 {
		t.Errorf("an unknown event has consumers: %+v", got)
	}
}

func TestConsumerNamed(t *testing.T) {
	t.Parallel()
	c, ok := contracts.ConsumerNamed(contracts.ConsumerStock)
	if !ok || c.Queue != contracts.QueueStock || c.DeadLetterQueue != contracts.QueueStockDLQ || len(c.Events) != 2 {
		t.Errorf("ConsumerNamed(stock) = %+v, %v", c, ok)
	}
	if c, ok := contracts.ConsumerNamed("billing"); ok {
		t.Errorf("ConsumerNamed(billing) = %+v, want none", c)
	}
}
