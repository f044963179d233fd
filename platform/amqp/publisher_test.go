package amqp

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/testkit"
)

func TestDeclareIsIdempotent(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo) // first declare
	for range 2 {
		ch, err := conn.Channel(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := topo.Declare(ch); err != nil {
			t.Fatalf("declare again: %v", err)
		}
		_ = ch.Close()
	}
	raw := rawChannel(t)
	for _, q := range []string{topo.Queues[0].Name, topo.Queues[0].DeadLetterQueue, RetryQueueName(topo.Queues[0].Name, topo.Queues[0].RetryDelays[1]), topo.UnroutableQueue} {
		if _, err := raw.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
			t.Fatalf("queue %s missing: %v", q, err)
		}
	}
}

func TestDeclareRejectsConflictingQueue(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	raw := rawChannel(t)
	// A classic queue under the name of the quorum queue.
	if _, err := raw.QueueDeclare(topo.Queues[0].Name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err := DialOptions(t.Context(), amqpURL(t), topo, testLogger(t), Options{})
	var amqpErr *amqp091.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp091.PreconditionFailed {
		t.Fatalf("err = %v, want PRECONDITION_FAILED", err)
	}
}

func TestUnroutableMessageIsKept(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	pub := NewPublisher(dialTest(t, topo), topo.Exchange)
	t.Cleanup(func() { _ = pub.Close() })

	msg := Message{RoutingKey: "nobody.listens.v1", MessageID: "m-1", Type: "nobody.listens.v1", Body: []byte(`{}`)}
	if _, err := pub.PublishBatch(t.Context(), []Message{msg}, 5*time.Second); err != nil {
		t.Fatalf("publish: %v", err)
	}
	d := getOne(t, rawChannel(t), topo.UnroutableQueue, 5*time.Second)
	if d.MessageId != "m-1" || d.RoutingKey != "nobody.listens.v1" {
		t.Fatalf("got %q with key %q", d.MessageId, d.RoutingKey)
	}
}

// TestPublishBatchRefusesAnUnencodableMessage: a message with a short string
// over 255 bytes is not sent (the library would fail the frame and close the
// connection); the error names the field, the messages before it are
// confirmed, and the same publisher goes on publishing on the same connection.
func TestPublishBatchRefusesAnUnencodableMessage(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	logger, logs := testkit.Logger(t)
	conn, err := DialOptions(t.Context(), amqpURL(t), topo, logger, Options{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pub := NewPublisher(conn, topo.Exchange)
	t.Cleanup(func() { _ = pub.Close() })

	msgs := messages(3, "long")
	msgs[1].CorrelationID = strings.Repeat("c", 256)
	confirmed, err := pub.PublishBatch(t.Context(), msgs, 5*time.Second)
	var pe *PublishError
	if confirmed != 1 || !errors.As(err, &pe) || pe.Index != 1 || !strings.Contains(err.Error(), "correlation_id is 256 bytes") {
		t.Fatalf("confirmed %d, err %v; want 1 and the correlation_id of message 1 named", confirmed, err)
	}
	if confirmed, err := pub.PublishBatch(t.Context(), messages(2, "after"), 5*time.Second); confirmed != 2 || err != nil {
		t.Fatalf("after: confirmed %d, err %v", confirmed, err)
	}
	if n := len(connectedNodes(t, logs)); n != 1 || strings.Contains(logs.String(), "connection lost") {
		t.Errorf("%d connects, want 1: the connection was lost\n%s", n, logs)
	}
}

func TestPublishBatchConfirmsAllInOrder(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	pub := NewPublisher(dialTest(t, topo), topo.Exchange)
	t.Cleanup(func() { _ = pub.Close() })

	const n = 1000
	msgs := messages(n, "batch")
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	msgs[0].Timestamp = ts
	confirmed, err := pub.PublishBatch(t.Context(), msgs, 10*time.Second)
	if err != nil || confirmed != n {
		t.Fatalf("confirmed %d, err %v; want %d, nil", confirmed, err, n)
	}

	ch := rawChannel(t)
	deliveries, err := ch.Consume(topo.Queues[0].Name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case d := <-deliveries:
			want := msgs[i]
			if d.MessageId != want.MessageID || string(d.Body) != string(want.Body) {
				t.Fatalf("delivery %d: got %s %s, want %s %s", i, d.MessageId, d.Body, want.MessageID, want.Body)
			}
			if i == 0 {
				if d.ContentType != "application/json" || d.DeliveryMode != amqp091.Persistent ||
					d.Type != testKey || !d.Timestamp.Equal(ts) || d.Headers["correlation_id"] != "c-"+want.MessageID {
					t.Fatalf("properties: %+v", d)
				}
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("only %d of %d delivered", i, n)
		}
	}
}

func TestPublishBatchToMissingExchangeFailsThenRecovers(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	missing := uniqueName(t, "t.missing")
	pub := NewPublisher(conn, missing)
	t.Cleanup(func() { _ = pub.Close() })

	msgs := messages(50, "missing")
	confirmed, err := pub.PublishBatch(t.Context(), msgs, 5*time.Second)
	var pubErr *PublishError
	if !errors.As(err, &pubErr) || confirmed >= len(msgs) || pubErr.Index != confirmed ||
		pubErr.MessageID != msgs[confirmed].MessageID {
		t.Fatalf("confirmed %d, err %v", confirmed, err)
	}
	var amqpErr *amqp091.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp091.NotFound {
		t.Fatalf("err %v does not carry 404 NOT_FOUND", err)
	}

	// Create the exchange, routed into the test queue; the same publisher
	// reopens its channel and the next batch goes through.
	raw := rawChannel(t)
	if err := raw.ExchangeDeclare(missing, amqp091.ExchangeTopic, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rawChannel(t).ExchangeDelete(missing, false, false) })
	if err := raw.QueueBind(topo.UnroutableQueue, "#", missing, false, nil); err != nil {
		t.Fatal(err)
	}
	confirmed, err = pub.PublishBatch(t.Context(), msgs, 5*time.Second)
	if err != nil || confirmed != len(msgs) {
		t.Fatalf("after reopen: confirmed %d, err %v", confirmed, err)
	}
}

func TestPublishBatchStopsAtReturnedMessage(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	// The default exchange has no alternate exchange: a key that names no
	// queue is returned.
	pub := NewPublisher(dialTest(t, topo), "")
	t.Cleanup(func() { _ = pub.Close() })

	msgs := []Message{
		{RoutingKey: topo.Queues[0].Name, MessageID: "ok-1", Body: []byte(`{}`)},
		{RoutingKey: topo.Queues[0].Name, MessageID: "ok-2", Body: []byte(`{}`)},
		{RoutingKey: uniqueName(t, "no.such.queue"), MessageID: "lost", Body: []byte(`{}`)},
		{RoutingKey: topo.Queues[0].Name, MessageID: "ok-3", Body: []byte(`{}`)},
	}
	confirmed, err := pub.PublishBatch(t.Context(), msgs, 5*time.Second)
	if confirmed != 2 || !errors.Is(err, ErrReturned) {
		t.Fatalf("confirmed %d, err %v; want 2, ErrReturned", confirmed, err)
	}
	var pubErr *PublishError
	if !errors.As(err, &pubErr) || pubErr.MessageID != "lost" {
		t.Fatalf("err %v does not name the returned message", err)
	}
	if _, err := pub.PublishBatch(t.Context(), msgs[3:4], 5*time.Second); err != nil {
		t.Fatalf("next publish: %v", err)
	}
}

func TestPublisherReopensClosedChannel(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	pub := NewPublisher(dialTest(t, topo), topo.Exchange)
	t.Cleanup(func() { _ = pub.Close() })
	msgs := messages(10, "reopen")
	if _, err := pub.PublishBatch(t.Context(), msgs, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	pub.mu.Lock()
	_ = pub.ch.Close()
	pub.mu.Unlock()
	if n, err := pub.PublishBatch(t.Context(), msgs, 5*time.Second); err != nil || n != len(msgs) {
		t.Fatalf("after close: confirmed %d, err %v", n, err)
	}
}

func TestPublisherRecoversAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	pub := NewPublisher(conn, topo.Exchange)
	t.Cleanup(func() { _ = pub.Close() })
	if _, err := pub.PublishBatch(t.Context(), messages(1, "before"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if conn.Ready() != nil {
		t.Fatalf("not ready: %v", conn.Ready())
	}
	if !conn.breakConnection() {
		t.Fatal("no socket to break")
	}
	// The first call may fail on the dead channel; a later one succeeds on
	// the new connection.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := pub.PublishBatch(t.Context(), messages(5, "after"), 5*time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publisher did not recover: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := conn.Ready(); err != nil {
		t.Fatalf("ready after reconnect: %v", err)
	}
}

func TestChannelWaitsForContext(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Channel(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("channel after close: %v", err)
	}
	if !errors.Is(conn.Ready(), ErrClosed) {
		t.Fatalf("ready after close: %v", conn.Ready())
	}
}

// TestEventTopologyDeclares: the contract's exchanges and every consumer's queue, with
// and without retry queues, declare on a fresh vhost.
func TestEventTopologyDeclares(t *testing.T) {
	t.Parallel()
	url := testkit.NewVhost(t)
	var queues []QueueSpec
	for n, c := range contracts.Consumers() {
		queues = append(queues, ConsumerQueue(c, DefaultRetryDelays()[:n]))
	}
	conn, err := DialOptions(t.Context(), url, EventTopology(queues...), testLogger(t), Options{MinBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if err := conn.Ready(); err != nil {
		t.Fatal(err)
	}
}

func TestParseRetryDelays(t *testing.T) {
	t.Parallel()
	got, err := ParseRetryDelays("50ms, 2s,1m")
	if err != nil || fmt.Sprint(got) != "[50ms 2s 1m0s]" {
		t.Errorf("ParseRetryDelays = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1s,", "soon", "0s", "1.5ms", "-1s", "500us"} {
		if got, err := ParseRetryDelays(bad); err == nil {
			t.Errorf("ParseRetryDelays(%q) = %v, want an error", bad, got)
		}
	}
}
