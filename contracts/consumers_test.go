package contracts_test

import (
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
	for _, e := range contracts.EventNames() {
		got := contracts.ConsumersOf(e)
		if len(got) != 2 || got[0].Name != contracts.ConsumerStock || got[1].Name != contracts.ConsumerShipping {
			t.Errorf("ConsumersOf(%s) = %+v, want stock and shipping", e, got)
		}
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
