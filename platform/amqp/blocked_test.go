package amqp

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"example.com/shop/testkit"
)

// nodeTopology is a topology named after prefix for a private node, which
// is thrown away with its entities when the test ends.
func nodeTopology(prefix string) Topology {
	return Topology{
		Exchange: prefix + ".events", AlternateExchange: prefix + ".alternate", UnroutableQueue: prefix + ".unroutable",
		DeadLetterExchange: prefix + ".dlx",
		Queues: []QueueSpec{{
			Name: prefix + ".q", DeadLetterQueue: prefix + ".q.dlq", RoutingKeys: []string{testKey},
			RetryDelays: []time.Duration{50 * time.Millisecond},
		}},
	}
}

// TestResourceAlarm raises memory alarms on one private node (booting one
// is slow, so its parts share it and run one after the other).
func TestResourceAlarm(t *testing.T) {
	t.Parallel()
	node := testkit.StartRabbitNode(t)
	t.Run("publisher", func(t *testing.T) { publisherDuringAResourceAlarm(t, node) })
	t.Run("consumer retry path", func(t *testing.T) { consumerRetryPathDuringAResourceAlarm(t, node) })
}

func jsonLogger(logs *testkit.Logs) *slog.Logger {
	return slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// within runs fn and fails t when it takes longer than limit: the test's own
// bound on a call that must not hang.
func within(t *testing.T, limit time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); fn() }()
	select {
	case <-done:
		t.Logf("%s took %v", what, time.Since(start).Round(time.Millisecond))
	case <-time.After(limit):
		t.Fatalf("%s still running after %v", what, limit)
	}
}

// publisherDuringAResourceAlarm raises a memory alarm on node: the block is
// noticed, logged once when it starts and once when it ends,
// exported and reported by Ready; publishing fails with ErrBlocked within its
// timeout instead of hanging, publishing works again once the alarm clears,
// and Close during an alarm returns before CloseTimeout (no handshake).
func publisherDuringAResourceAlarm(t *testing.T, node *testkit.RabbitNode) {
	topo := nodeTopology("publisher")
	logs := &testkit.Logs{}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const closeTimeout = 2 * time.Second
	conn, err := DialOptions(ctx, node.URL, topo, jsonLogger(logs), Options{
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Name: "relay", CloseTimeout: closeTimeout, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = conn.Close()
		}
	})
	pub := NewPublisher(conn, topo.Exchange)
	const timeout = 2 * time.Second
	if _, err := pub.PublishBatch(ctx, messages(3, "before"), timeout); err != nil {
		t.Fatalf("publish before the alarm: %v", err)
	}
	gauge := func(want string) error {
		return testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP amqp_connection_blocked 1 while the broker blocks the connection (memory or disk alarm), else 0.
# TYPE amqp_connection_blocked gauge
amqp_connection_blocked{connection="relay"} `+want+"\n"), "amqp_connection_blocked")
	}
	if err := gauge("0"); err != nil {
		t.Fatal(err)
	}

	node.Alarm(t)
	// The broker blocks a connection when it publishes: the first batch after
	// the alarm is sent and never confirmed. It must fail within its timeout.
	var first error
	within(t, timeout+5*time.Second, "the first publish during the alarm", func() {
		_, first = pub.PublishBatch(ctx, messages(5, "during"), timeout)
	})
	if !errors.Is(first, ErrConfirmTimeout) && !errors.Is(first, ErrBlocked) {
		t.Fatalf("first publish during the alarm: %v, want a timeout or ErrBlocked", first)
	}
	eventually(t, 30*time.Second, "Ready to report the block", func() bool { return errors.Is(conn.Ready(), ErrBlocked) })
	if r := conn.Ready(); !strings.Contains(r.Error(), "low on memory") {
		t.Errorf("Ready() = %v, want the broker's reason", r)
	}
	if err := gauge("1"); err != nil {
		t.Error(err)
	}
	// Known blocked: nothing is sent, and the call says why it failed.
	for range 2 {
		var err error
		within(t, timeout+5*time.Second, "a publish on the blocked connection", func() {
			_, err = pub.PublishBatch(ctx, messages(5, "blocked"), timeout)
		})
		var pe *PublishError
		if !errors.Is(err, ErrBlocked) || !errors.As(err, &pe) || !strings.Contains(err.Error(), "low on memory") {
			t.Fatalf("publish while blocked: %v, want a *PublishError wrapping ErrBlocked with the reason", err)
		}
	}
	if n := strings.Count(logs.String(), "amqp connection blocked by the broker"); n != 1 {
		t.Errorf("%d WARN lines for the start of the block, want 1:\n%s", n, logs)
	}

	node.ClearAlarm(t)
	eventually(t, 30*time.Second, "Ready after the alarm", func() bool { return conn.Ready() == nil })
	if err := gauge("0"); err != nil {
		t.Error(err)
	}
	if l := logs.String(); strings.Count(l, `"msg":"amqp connection unblocked"`) != 1 || !strings.Contains(l, `"blocked_ms":`) {
		t.Errorf("want one WARN line for the end of the block with blocked_ms:\n%s", l)
	}
	eventually(t, 30*time.Second, "a publish after the alarm", func() bool {
		_, err := pub.PublishBatch(ctx, messages(5, "after"), timeout)
		return err == nil
	})

	// Shutdown during an alarm: the broker reads nothing, so Close waits for
	// no handshake and closes the socket at once, well within CloseTimeout.
	node.Alarm(t)
	_, _ = pub.PublishBatch(ctx, messages(1, "again"), timeout)
	eventually(t, 30*time.Second, "the second block", func() bool { return errors.Is(conn.Ready(), ErrBlocked) })
	within(t, closeTimeout, "Publisher.Close and Connection.Close during the alarm", func() {
		_ = pub.Close()
		closed = true
		_ = conn.Close()
	})
	node.ClearAlarm(t)
}

// consumerRetryPathDuringAResourceAlarm: a handler fails while the broker
// blocks the retry connection. The retry publish fails within its timeout,
// the consumer pauses instead of spending the attempt, the delivery waits in
// the queue, and after the alarm it is retried and handled; nothing is
// dead-lettered.
func consumerRetryPathDuringAResourceAlarm(t *testing.T, node *testkit.RabbitNode) {
	topo := nodeTopology("consumer")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dial := func(name string) *Connection {
		conn, err := DialOptions(ctx, node.URL, topo, testLogger(t), Options{
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Name: name, CloseTimeout: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	consume, retry := dial("consume"), dial("retry")

	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	rec := &recorder{fn: func(d Delivery) error {
		if d.Attempt > 1 {
			return nil
		}
		select {
		case started <- struct{}{}:
			<-gate // the first call fails only once the alarm is on
		default:
		}
		return errors.New("handler failed")
	}}
	c, _ := startConsumer(t, consume, ConsumerConfig{
		Queue: topo.Queues[0].Name, MaxAttempts: 2, RetryDelays: topo.Queues[0].RetryDelays,
		RetryConn: retry, RetryConfirmTimeout: time.Second,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	}, rec.handle)
	publishAll(t, consume, topo.Exchange, messages(1, "alarm"))
	<-started

	node.Alarm(t)
	// Make the retry connection publish once so that the broker blocks it.
	_, _ = NewPublisher(retry, "").PublishBatch(ctx, []Message{{RoutingKey: "nowhere", MessageID: "probe"}}, time.Second)
	eventually(t, 30*time.Second, "the retry connection blocked", func() bool { return errors.Is(retry.Ready(), ErrBlocked) })
	close(gate)
	eventually(t, 30*time.Second, "the consumer paused", func() bool { return errors.Is(c.Ready(), ErrPaused) })
	if r := c.Ready(); !strings.Contains(r.Error(), "low on memory") && !strings.Contains(r.Error(), ErrBlocked.Error()) {
		t.Errorf("Ready() = %v, want the block named", r)
	}
	raw, err := dialRaw(node.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	count := func(queue string) int {
		ch, err := raw.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	eventually(t, 30*time.Second, "the delivery back in its queue", func() bool { return count(topo.Queues[0].Name) == 1 })
	if n := count(topo.Queues[0].DeadLetterQueue); n != 0 {
		t.Fatalf("%d messages dead-lettered during the alarm", n)
	}

	node.ClearAlarm(t)
	eventually(t, 30*time.Second, "the second attempt handled", func() bool {
		return rec.count(func(d Delivery) bool { return d.Attempt == 2 }) == 1
	})
	if n := count(topo.Queues[0].DeadLetterQueue); n != 0 {
		t.Errorf("%d messages dead-lettered", n)
	}
	eventually(t, 30*time.Second, "the consumer ready", func() bool { return c.Ready() == nil })
}
