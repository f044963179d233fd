package contracts_test

import (
	"reflect"
	"slices"
	"testing"

	"example.com/shop/contracts"
)

// Every consumer has queues of its own, and ConsumersOf lists an event's consumers in the
// order of Consumers. An event may have none yet: a service that only produces publishes
// it before any other receives it (its copies wait in app.events.unroutable).
func TestConsumersHaveDistinctQueues(t *testing.T) {
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
		var want []string
		for _, c := range contracts.Consumers() {
			if slices.Contains(c.Events, e) {
				want = append(want, c.Name)
			}
		}
		var got []string
		for _, c := range contracts.ConsumersOf(e) {
			got = append(got, c.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ConsumersOf(%s) = %v, want %v, in the order of Consumers", e, got, want)
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
	if c, ok := contracts.ConsumerNamed("no-such-consumer"); ok {
		t.Errorf("ConsumerNamed(no-such-consumer) = %+v, want none", c)
	}
}

// The registry is consistent: every event has exactly one producer, every event a consumer
// receives is published, and the services are exactly those the producers and consumers
// name, each with its own database and address.
func TestRegistryIsConsistent(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, e := range contracts.EventNames() {
		known[e] = true
	}
	roles := map[string]bool{}
	published := map[string]string{}
	for _, p := range contracts.Producers() {
		if p.Name == "" || len(p.Events) == 0 {
			t.Errorf("incomplete producer %+v", p)
		}
		roles[p.Name] = true
		for _, e := range p.Events {
			if !known[e] {
				t.Errorf("producer %s publishes %s, which is not in EventNames", p.Name, e)
			}
			if other, ok := published[e]; ok {
				t.Errorf("%s is published by both %s and %s", e, other, p.Name)
			}
			published[e] = p.Name
		}
	}
	for _, e := range contracts.EventNames() {
		p, ok := contracts.ProducerOf(e)
		if !ok || p.Name != published[e] {
			t.Errorf("ProducerOf(%s) = %+v, %v; want %s", e, p, ok, published[e])
		}
	}
	for _, c := range contracts.Consumers() {
		roles[c.Name] = true
		for _, e := range c.Events {
			if published[e] == "" {
				t.Errorf("consumer %s receives %s, which no producer publishes", c.Name, e)
			}
		}
	}
	seen := map[string]bool{"address :8085": true} // the auditor's
	for _, s := range contracts.Services() {
		if (s.RelayAddr != "") != (len(s.Publishes) > 0) {
			t.Errorf("service %s: a relay address without events to publish, or events without one", s.Name)
		}
		addrs := []string{"name " + s.Name, "database " + s.Database, "address " + s.HTTPAddr}
		if s.RelayAddr != "" {
			addrs = append(addrs, "address "+s.RelayAddr)
		}
		for _, v := range addrs {
			if seen[v] {
				t.Errorf("two services have the %s", v)
			}
			seen[v] = true
		}
		if !roles[s.Name] {
			t.Errorf("service %s neither produces nor consumes", s.Name)
		}
		if got, ok := contracts.ServiceNamed(s.Name); !ok || !reflect.DeepEqual(got, s) {
			t.Errorf("ServiceNamed(%s) = %+v, %v", s.Name, got, ok)
		}
		delete(roles, s.Name)
	}
	for name := range roles {
		t.Errorf("%s is a producer or consumer but not in Services", name)
	}
	if _, ok := contracts.ProducerOf("order.order.unknown.v1"); ok {
		t.Error("an unknown event has a producer")
	}
}
