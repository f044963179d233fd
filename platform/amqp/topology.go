// Package amqp is the RabbitMQ side of the messaging platform: topology,
// a reconnecting connection, a confirming publisher and a consumer runtime
// with retries and dead-lettering.
package amqp

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
)

// DefaultRetryDelays returns the delay of each retry level a consumer uses
// unless configured otherwise: 1 s, 5 s and 30 s. A failed delivery waits in the retry
// queue of its level for that long before it returns to its queue.
func DefaultRetryDelays() []time.Duration {
	return []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}
}

// Topology is the set of exchanges and queues one application needs.
// Declare creates it; every field must be set.
type Topology struct {
	// Exchange is the durable topic exchange events are published to.
	Exchange string
	// AlternateExchange is the durable fanout exchange that receives every
	// message Exchange cannot route, so that none is silently dropped.
	AlternateExchange string
	// UnroutableQueue is the durable quorum queue bound to AlternateExchange.
	// Empty declares no queue there: the topology of a process whose broker
	// user may not read AlternateExchange, which binding a queue to it needs
	// (a relay, PublisherTopology); another process declares and binds it.
	UnroutableQueue string
	// DeadLetterExchange is the durable direct exchange that routes rejected
	// messages to the dead-letter queue named by their routing key.
	DeadLetterExchange string
	// Queues are the consuming queues.
	Queues []QueueSpec
}

// QueueSpec describes one consuming queue together with its dead-letter
// queue and its retry queues.
type QueueSpec struct {
	// Name of the durable quorum queue.
	Name string
	// DeadLetterQueue is the durable quorum queue that keeps rejected
	// messages, bound to Topology.DeadLetterExchange with its own name.
	DeadLetterQueue string
	// RoutingKeys bind Name to Topology.Exchange (topic patterns allowed).
	RoutingKeys []string
	// RetryDelays holds one delay per retry level (level n, 1-based, is
	// RetryDelays[n-1]), each a queue RetryQueueName(Name, delay). Delays are
	// whole milliseconds (>= 1 ms). Only the consuming service declares them;
	// a producer's view of the queue leaves them empty.
	RetryDelays []time.Duration
}

// RetryQueueName names the retry queue that holds messages of queue for
// delay: "<queue>.wait.<delay>", e.g. "<queue>.wait.5s". Naming it after its
// delay (its x-message-ttl) means a changed RETRY_DELAYS setting declares new
// queues instead of failing on the old ones' arguments; an old retry queue
// drains into its main queue and can then be deleted. (Releases before the
// queue's CopiesExchange named them "<queue>.retry.<delay>" and sent them back
// through the default exchange; see docs/operations.md, "Broker users".)
func RetryQueueName(queue string, delay time.Duration) string {
	return queue + ".wait." + delay.String()
}

// QueueNames lists every queue t declares: the unroutable queue (when set), then
// for each consumer queue its main queue, dead-letter queue and retry queues.
func (t Topology) QueueNames() []string {
	var names []string
	if t.UnroutableQueue != "" {
		names = append(names, t.UnroutableQueue)
	}
	for _, q := range t.Queues {
		names = append(names, q.Name, q.DeadLetterQueue)
		for _, d := range q.RetryDelays {
			names = append(names, RetryQueueName(q.Name, d))
		}
	}
	return names
}

// ExchangeNames lists every exchange t declares: Exchange, AlternateExchange,
// DeadLetterExchange, then each consumer queue's CopiesExchange.
func (t Topology) ExchangeNames() []string {
	names := []string{t.Exchange, t.AlternateExchange, t.DeadLetterExchange}
	for _, q := range t.Queues {
		names = append(names, CopiesExchange(q.Name))
	}
	return names
}

// EventTopology returns the topology of the event exchange with queues: the topic
// exchange contracts.Exchange (app.events) with its alternate exchange and unroutable
// queue, and the dead-letter exchange, all named by the contracts constants. With no
// queue it is what a producer needs to publish (docs/architecture.md, flow step 4); a
// consumer adds its own queue (ConsumerQueue).
func EventTopology(queues ...QueueSpec) Topology {
	return Topology{
		Exchange:           contracts.Exchange,
		AlternateExchange:  contracts.AlternateExchange,
		UnroutableQueue:    contracts.UnroutableQueue,
		DeadLetterExchange: contracts.DeadLetterExchange,
		Queues:             slices.Clone(queues),
	}
}

// PublisherTopology returns the topology a relay declares under its own broker
// user (RELAY_DECLARE_QUEUES=false): EventTopology's exchanges, app.events with
// its alternate exchange and the dead-letter exchange, and no queue, not even
// app.events.unroutable. Binding that queue needs the right to read
// app.events.alternate, and a user with that right could bind app.events to
// app.events.alternate and route, through the alternate exchange, events its
// topic permission refuses (docs/architecture.md, rule 8); the relays' users do
// not have it (deploy/rabbitmq/definitions.json). Every consumer declares and
// binds app.events.unroutable; until one has, an event no queue takes is returned
// to the relay (mandatory), which publishes it again later.
func PublisherTopology() Topology {
	t := EventTopology()
	t.UnroutableQueue = ""
	return t
}

// ConsumerQueue returns the queue of consumer c as the contract names it: c.Queue
// bound to each of c.Events, with its dead-letter queue c.DeadLetterQueue and one retry
// queue per delay in retryDelays (whole milliseconds >= 1 ms; nil declares none, the
// view of a process that publishes to the queue but does not consume it).
func ConsumerQueue(c contracts.Consumer, retryDelays []time.Duration) QueueSpec {
	return QueueSpec{
		Name:            c.Queue,
		DeadLetterQueue: c.DeadLetterQueue,
		RoutingKeys:     slices.Clone(c.Events),
		RetryDelays:     slices.Clone(retryDelays),
	}
}

// ParseRetryDelays parses a comma-separated list of retry delays such as
// "50ms,100ms,1s": at least one, each a Go duration that is a whole number of
// milliseconds >= 1 ms (a retry queue's x-message-ttl).
func ParseRetryDelays(raw string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(raw, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("%s is not a whole number of milliseconds >= 1ms", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// Validate reports a missing name (UnroutableQueue may be empty) or a retry
// delay below one millisecond.
func (t Topology) Validate() error {
	var errs []error
	for _, f := range [...]struct{ field, value string }{
		{"Exchange", t.Exchange}, {"AlternateExchange", t.AlternateExchange},
		{"DeadLetterExchange", t.DeadLetterExchange},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("topology: %s is empty", f.field))
		}
	}
	for i, q := range t.Queues {
		if q.Name == "" || q.DeadLetterQueue == "" {
			errs = append(errs, fmt.Errorf("topology: queue %d: Name and DeadLetterQueue are required", i))
		}
		for n, d := range q.RetryDelays {
			if d < time.Millisecond {
				errs = append(errs, fmt.Errorf("topology: queue %q: retry delay %d is %v, below 1ms", q.Name, n+1, d))
			}
		}
	}
	return errors.Join(errs...)
}

// Declare creates the exchanges, queues and bindings of t on ch. It is
// idempotent: declaring the same topology again changes nothing. It fails
// with the broker's PRECONDITION_FAILED error (which also closes ch) when an
// entity already exists with other arguments.
//
// Every queue is a quorum queue, so that each keeps working while a node of
// a cluster is away. Main queues dead-letter with the at-least-once strategy
// (which requires x-overflow=reject-publish), so a message rejected to the
// DLQ is never dropped on the way (docs/architecture.md, rule 3). Each
// consumer queue has its CopiesExchange, bound to the queue, its DLQ and its
// retry queues by their names; retry queues have a per-queue x-message-ttl and
// dead-letter expired messages back to their queue through it, at least once
// too. Nothing uses the default exchange, so no user needs to write to it
// (docs/architecture.md, rule 8).
func (t Topology) Declare(ch *amqp091.Channel) error {
	if err := t.Validate(); err != nil {
		return err
	}
	const durable, autoDelete, internal, noWait = true, false, false, false

	if err := ch.ExchangeDeclare(t.AlternateExchange, amqp091.ExchangeFanout, durable, autoDelete, internal, noWait, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.AlternateExchange, err)
	}
	if t.UnroutableQueue != "" {
		if err := declareQueue(ch, t.UnroutableQueue, quorum()); err != nil {
			return err
		}
		if err := bind(ch, t.UnroutableQueue, "", t.AlternateExchange); err != nil {
			return err
		}
	}
	if err := ch.ExchangeDeclare(t.Exchange, amqp091.ExchangeTopic, durable, autoDelete, internal, noWait,
		amqp091.Table{"alternate-exchange": t.AlternateExchange}); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.Exchange, err)
	}
	if err := ch.ExchangeDeclare(t.DeadLetterExchange, amqp091.ExchangeDirect, durable, autoDelete, internal, noWait, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.DeadLetterExchange, err)
	}

	for _, q := range t.Queues {
		if err := declareQueue(ch, q.DeadLetterQueue, quorum()); err != nil {
			return err
		}
		if err := bind(ch, q.DeadLetterQueue, q.DeadLetterQueue, t.DeadLetterExchange); err != nil {
			return err
		}
		args := quorum()
		args["x-dead-letter-exchange"] = t.DeadLetterExchange
		args["x-dead-letter-routing-key"] = q.DeadLetterQueue
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
		if err := declareQueue(ch, q.Name, args); err != nil {
			return err
		}
		for _, key := range q.RoutingKeys {
			if err := bind(ch, q.Name, key, t.Exchange); err != nil {
				return err
			}
		}
		if err := declareCopies(ch, q); err != nil {
			return err
		}
	}
	return nil
}

// declareCopies declares q's CopiesExchange, binds q, its DLQ and its retry
// queues to it by name, and declares the retry queues.
func declareCopies(ch *amqp091.Channel, q QueueSpec) error {
	copies := CopiesExchange(q.Name)
	if err := ch.ExchangeDeclare(copies, amqp091.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", copies, err)
	}
	for _, name := range []string{q.Name, q.DeadLetterQueue} {
		if err := bind(ch, name, name, copies); err != nil {
			return err
		}
	}
	for _, d := range q.RetryDelays {
		name := RetryQueueName(q.Name, d)
		args := quorum()
		args["x-message-ttl"] = d.Milliseconds()
		args["x-dead-letter-exchange"] = copies
		args["x-dead-letter-routing-key"] = q.Name
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
		if err := declareQueue(ch, name, args); err != nil {
			return err
		}
		if err := bind(ch, name, name, copies); err != nil {
			return err
		}
	}
	return nil
}

func quorum() amqp091.Table {
	return amqp091.Table{"x-queue-type": amqp091.QueueTypeQuorum}
}

func declareQueue(ch *amqp091.Channel, name string, args amqp091.Table) error {
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	return nil
}

func bind(ch *amqp091.Channel, queue, key, exchange string) error {
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s with key %q: %w", queue, exchange, key, err)
	}
	return nil
}
