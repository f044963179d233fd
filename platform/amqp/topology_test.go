package amqp_test

import (
	"testing"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
)

// TestPublisherTopologyDeclaresNoQueue: a relay under its own broker user declares
// the exchanges of EventTopology and no queue, not even the unroutable one, which
// binding to app.events.alternate would need the right to read.
func TestPublisherTopologyDeclaresNoQueue(t *testing.T) {
	t.Parallel()
	topo := amqp.PublisherTopology()
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := topo.QueueNames(); len(got) != 0 {
		t.Errorf("QueueNames = %v, want none", got)
	}
	want := amqp.EventTopology().ExchangeNames()
	got := topo.ExchangeNames()
	if len(got) != len(want) || got[0] != contracts.Exchange || got[1] != contracts.AlternateExchange {
		t.Errorf("ExchangeNames = %v, want %v", got, want)
	}
	if q := amqp.EventTopology().QueueNames(); len(q) != 1 || q[0] != contracts.UnroutableQueue {
		t.Errorf("EventTopology().QueueNames() = %v, want the unroutable queue", q)
	}
}
