package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
)

// contractEvent is a valid order-placed envelope, as the relay publishes it.
func contractEvent(t *testing.T) (uuid.UUID, []byte) {
	t.Helper()
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "c-1", contracts.OrderPlaced{
		OrderID: uuid.Must(uuid.NewV7()), CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return env.EventID, body
}

// TestContractCheckDecidesAsTheInbox: for each delivery the consumer's inbox
// dead-letters before any database write, ContractCheck gives a reason, and for a
// valid one it gives none; the inbox here has no database, so it can only answer
// for the first kind. Among them: an event that did not come from its producer's
// relay user through app.events, also as a copy that says so (docs/architecture.md,
// rule 8).
func TestContractCheckDecidesAsTheInbox(t *testing.T) {
	t.Parallel()
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	consumer, _ := contracts.ConsumerNamed(contracts.ConsumerStock)
	pubs := inbox.Publishers{Exchange: contracts.Exchange, Users: map[string]string{
		contracts.ProducerOrder: "order-relay", contracts.ProducerStock: "stock-relay"}}
	check := ContractCheck(v, consumer, pubs)
	ib := inbox.New(nil, consumer.Name, v, nil, nil, inbox.WithPublishers(pubs))
	id, body := contractEvent(t)
	twice := strings.Replace(string(body), `"event_id":`, `"event_id":"`+uuid.NewString()+`","event_id":`, 1)
	const ex, relay = contracts.Exchange, "order-relay"
	copies := amqp.CopiesExchange(consumer.Queue)
	copyFrom := func(exchange, user string) amqp091.Table {
		return amqp091.Table{amqp.HeaderOriginExchange: exchange, amqp.HeaderOriginUserID: user}
	}
	for name, d := range map[string]amqp091.Delivery{
		"not JSON":             {Body: []byte(`{"event_id":`), MessageId: id.String(), Exchange: ex, UserId: relay},
		"schema":               {Body: []byte(strings.Replace(string(body), `"quantity":"1.000"`, `"quantity":"-1"`, 1)), Exchange: ex, UserId: relay},
		"content type":         {Body: body, ContentType: "text/plain", Exchange: ex, UserId: relay},
		"message id":           {Body: body, MessageId: uuid.NewString(), Exchange: ex, UserId: relay},
		"event_id given twice": {Body: []byte(twice), MessageId: uuid.NewString(), Exchange: ex, UserId: relay},
		"type":                 {Body: body, Type: contracts.EventOrderCancelled, Exchange: ex, UserId: relay},
		"default exchange":     {Body: body, UserId: relay},
		"another user":         {Body: body, Exchange: ex, UserId: "stock-relay"},
		"no user":              {Body: body, Exchange: ex},
		"a copy's origin":      {Body: body, Exchange: copies, Headers: copyFrom("", relay)},
		"origin headers, not a copy": {Body: body, Exchange: ex, UserId: "stock",
			Headers: copyFrom(ex, relay)},
	} {
		reason := check(d)
		got := ib.HandleDelivery(context.Background(), amqp.Delivery{Body: d.Body, MessageID: d.MessageId, ContentType: d.ContentType,
			Type: d.Type, Origin: amqp.OriginOf(consumer.Queue, d.Exchange, d.UserId, d.Headers)})
		if reason == nil || !errors.Is(got, amqp.ErrPermanent) {
			t.Errorf("%s: check %v, inbox %v: want both to refuse", name, reason, got)
		}
	}
	for name, d := range map[string]amqp091.Delivery{
		"valid":                     {Body: body, MessageId: id.String(), ContentType: "application/json", Type: contracts.EventOrderPlaced, Exchange: ex, UserId: relay},
		"event_id twice, last kept": {Body: []byte(twice), MessageId: id.String(), Exchange: ex, UserId: relay},
		"a retried copy":            {Body: body, Exchange: copies, Headers: copyFrom(ex, relay)},
	} {
		if err := check(d); err != nil {
			t.Errorf("%s: %v, want nil", name, err)
		}
	}
}

// TestReplayDryRunRunsTheConsumersCheck: a dead letter that fails the contract is
// not "apply": replay --dry-run says it would be dead-lettered again and why, and
// replay refuses it (keeping it) unless --force, while a valid one is replayed.
func TestReplayDryRunRunsTheConsumersCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	consumer, _ := contracts.ConsumerNamed(contracts.ConsumerStock)
	consumer.Queue = f.cfg.Queue
	f.cfg.Check = ContractCheck(v, consumer, inbox.Publishers{Exchange: f.topo.Exchange})
	f.consume(t, func() bool { return true })
	good, goodBody := contractEvent(t)
	bad, badBody := contractEvent(t)
	badBody = []byte(strings.Replace(string(badBody), `"quantity":"1.000"`, `"quantity":"-1"`, 1))
	f.publish(t,
		amqp.Message{RoutingKey: testKey, MessageID: good.String(), Body: goodBody},
		amqp.Message{RoutingKey: testKey, MessageID: bad.String(), Body: badBody})
	eventually(t, "2 dead letters", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 2 })

	out, err := f.run(t, "replay", "--dry-run", "--all")
	lines := map[uuid.UUID]string{}
	for _, l := range strings.Split(out, "\n") {
		for _, id := range []uuid.UUID{good, bad} {
			if strings.Contains(l, id.String()) {
				lines[id] = l
			}
		}
	}
	if err == nil || !strings.Contains(lines[good], "would replay") || !strings.Contains(lines[good], VerdictApply) {
		t.Errorf("dry run, valid event: %q (%v); want would replay, apply", lines[good], err)
	}
	if !strings.Contains(lines[bad], "refused") || !strings.Contains(lines[bad], "would dead-letter again: ") ||
		!strings.Contains(lines[bad], "quantity") || strings.Contains(lines[bad], VerdictApply) {
		t.Errorf("dry run, invalid event: %q; want refused, would dead-letter again: <reason naming quantity>", lines[bad])
	}
	if n := f.depth(t, f.cfg.DeadLetterQueue); n != 2 {
		t.Fatalf("dry run changed something: %d in the dead-letter queue", n)
	}
	if out, err := f.run(t, "replay", bad.String()); err == nil || !strings.Contains(out, "refused") {
		t.Errorf("replay of the invalid event = %q, %v; want refused", out, err)
	}
	if out, err := f.run(t, "replay", "--dry-run", "--force", bad.String()); err != nil ||
		!strings.Contains(out, "would replay") || !strings.Contains(out, "would dead-letter again: ") {
		t.Errorf("replay --dry-run --force = %q, %v; want would replay, saying it would dead-letter again", out, err)
	}
	// A refused message goes back when the command's connection closes; a
	// quorum queue counts it again a moment later.
	eventually(t, "the refused message back in the dead-letter queue", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 2 })
	if r := f.resolution(t, bad.String()); r != "open" {
		t.Fatalf("refused message resolved: %s", r)
	}
}

// TestIdentifyReadsAsTheStrictDecoder: the event_id that list shows and that
// dead_letter records is the one the consumer's strict decoder reads (and the inbox
// keys on): a member given twice counts with its last value, and a member whose name
// differs only in case is another member, not event_id.
func TestIdentifyReadsAsTheStrictDecoder(t *testing.T) {
	t.Parallel()
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	id, body := contractEvent(t)
	other := uuid.Must(uuid.NewV7())
	twice := []byte(strings.Replace(string(body), `"event_id":`, `"event_id":"`+other.String()+`","event_id":`, 1))
	env, err := v.Decode(twice)
	if err != nil {
		t.Fatal(err)
	}
	if got := Identify(twice, "", ""); got.EventID != env.EventID || got.Key != env.EventID.String() {
		t.Errorf("event_id given twice: Identify %s, the strict decoder %s", got.EventID, env.EventID)
	}
	mixed := []byte(`{"event_id":"` + id.String() + `","Event_ID":"` + other.String() + `","event_name":"x","occurred_at":"2026-01-02T03:04:05.000Z"}`)
	if got := Identify(mixed, "m", "t"); got.EventID != id || got.EventName != "x" {
		t.Errorf("event_id and Event_ID: Identify %+v, want event_id %s", got, id)
	}
}

// TestReplayForceVouchesForTheOrigin: a message dead-lettered for its origin (here
// sent straight to the queue, not through the exchange) is refused by replay, and
// replay --force sends it as from its producer's relay (Config.Vouch), so the
// consumer applies it instead of dead-lettering it again (docs/architecture.md,
// rule 8; docs/operations.md, "Database roles and broker users").
func TestReplayForceVouchesForTheOrigin(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pubs := inbox.Publishers{Exchange: f.topo.Exchange}
	applied := make(chan string, 2)
	f.consumeWith(t, func(_ context.Context, d amqp.Delivery) error {
		if err := pubs.Check(testKey, d.Origin); err != nil {
			return fmt.Errorf("%w: %w", amqp.ErrPermanent, err)
		}
		applied <- d.MessageID
		return nil
	})
	f.cfg.Check = func(d amqp091.Delivery) error {
		return pubs.Check(testKey, amqp.OriginOf(f.cfg.Queue, d.Exchange, d.UserId, d.Headers))
	}
	f.cfg.Vouch = pubs.Vouched

	id, m := event(time.Now())
	pub := amqp.NewPublisher(f.conn, "")
	defer pub.Close()
	if err := pub.Publish(t.Context(), f.cfg.Queue, amqp091.Publishing{
		MessageId: m.MessageID, Type: m.Type, Body: m.Body}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead letter", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 1 })

	if out, err := f.run(t, "replay", id.String()); err == nil || !strings.Contains(out, "refused") || !strings.Contains(out, "unauthenticated") {
		t.Fatalf("replay = %q, %v; want refused as unauthenticated", out, err)
	}
	if out, err := f.run(t, "replay", "--force", id.String()); err != nil || !strings.HasPrefix(out, "replayed") {
		t.Fatalf("replay --force = %q, %v", out, err)
	}
	select {
	case got := <-applied:
		if got != id.String() {
			t.Fatalf("applied %s, want %s", got, id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the forced replay was not applied")
	}
}
