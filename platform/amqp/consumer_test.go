package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"example.com/shop/testkit"
)

// recorder is a handler that records what it saw and answers with fn.
type recorder struct {
	mu   sync.Mutex
	seen []Delivery
	fn   func(d Delivery) error
}

func (r *recorder) handle(_ context.Context, d Delivery) error {
	r.mu.Lock()
	r.seen = append(r.seen, d)
	r.mu.Unlock()
	if r.fn == nil {
		return nil
	}
	return r.fn(d)
}

func (r *recorder) count(pred func(Delivery) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.seen {
		if pred == nil || pred(d) {
			n++
		}
	}
	return n
}

func (r *recorder) ids() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int)
	for _, d := range r.seen {
		m[d.MessageID]++
	}
	return m
}

// startConsumer runs a consumer until the returned stop is called (or the
// test ends); stop checks that Run returned nil.
func startConsumer(t *testing.T, conn *Connection, cfg ConsumerConfig, h HandlerFunc) (*Consumer, func()) {
	t.Helper()
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff, cfg.MaxBackoff = 5*time.Millisecond, 50*time.Millisecond
	}
	if cfg.DeadLetterQueue == "" {
		cfg.DeadLetterQueue = cfg.Queue + ".dlq" // testTopology's
	}
	c, err := NewConsumer(conn, cfg, h, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func publishAll(t *testing.T, conn *Connection, exchange string, msgs []Message) {
	t.Helper()
	pub := NewPublisher(conn, exchange)
	defer pub.Close()
	if n, err := pub.PublishBatch(t.Context(), msgs, 10*time.Second); err != nil {
		t.Fatalf("publish: confirmed %d: %v", n, err)
	}
}

func readyMessages(t *testing.T, queue string) int {
	t.Helper()
	q, err := rawChannel(t).QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
}

func TestConsumerAcksHandledMessages(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	rec := &recorder{}
	c, stop := startConsumer(t, conn, ConsumerConfig{Queue: topo.Queues[0].Name, Workers: 4}, rec.handle)

	msgs := messages(100, "ack")
	publishAll(t, conn, topo.Exchange, msgs)
	eventually(t, 10*time.Second, "100 deliveries", func() bool { return rec.count(nil) >= 100 })
	stop()

	if got := testutil.ToFloat64(c.metrics.processed); got != 100 {
		t.Errorf("processed_total = %v, want 100", got)
	}
	if n := readyMessages(t, topo.Queues[0].Name); n != 0 {
		t.Errorf("%d messages left in the queue, want 0", n)
	}
	for id, n := range rec.ids() {
		if n != 1 {
			t.Errorf("%s handled %d times", id, n)
		}
	}
	d := rec.seen[0]
	if d.Attempt != 1 || d.Type != testKey || d.RoutingKey != testKey || d.Headers["correlation_id"] == nil {
		t.Errorf("delivery: %+v", d)
	}
}

func TestConsumerDeadLettersPermanentErrorAtOnce(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	rec := &recorder{fn: func(Delivery) error { return fmt.Errorf("decode: %w", ErrPermanent) }}
	c, _ := startConsumer(t, conn, ConsumerConfig{Queue: topo.Queues[0].Name, RetryDelays: topo.Queues[0].RetryDelays}, rec.handle)

	msg := messages(1, "poison")[0]
	publishAll(t, conn, topo.Exchange, []Message{msg})
	d := getOne(t, rawChannel(t), topo.Queues[0].DeadLetterQueue, 10*time.Second)
	if string(d.Body) != string(msg.Body) || d.MessageId != msg.MessageID || d.Type != msg.Type ||
		d.Headers["correlation_id"] != msg.Headers["correlation_id"] || d.ContentType != "application/json" {
		t.Fatalf("dead-lettered message changed: %+v", d)
	}
	if n := rec.count(nil); n != 1 {
		t.Fatalf("handled %d times, want 1", n)
	}
	// The counter follows the dead-letter queue's confirm, a moment after the copy
	// can be read there.
	eventually(t, 5*time.Second, "dead_lettered_total 1", func() bool { return testutil.ToFloat64(c.metrics.deadLettered) == 1 })
}

func TestConsumerRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	rec := &recorder{fn: func(Delivery) error { return errors.New("database is down") }}
	const maxAttempts = 4 // more attempts than retry levels: the last level is reused
	c, _ := startConsumer(t, conn, ConsumerConfig{
		Queue: topo.Queues[0].Name, MaxAttempts: maxAttempts, RetryDelays: topo.Queues[0].RetryDelays,
	}, rec.handle)

	msg := messages(1, "flaky")[0]
	publishAll(t, conn, topo.Exchange, []Message{msg})
	d := getOne(t, rawChannel(t), topo.Queues[0].DeadLetterQueue, 10*time.Second)
	if string(d.Body) != string(msg.Body) || d.MessageId != msg.MessageID ||
		d.Headers["correlation_id"] != msg.Headers["correlation_id"] || AttemptOf(d.Headers["x-attempt"]) != maxAttempts {
		t.Fatalf("dead-lettered message: %+v", d)
	}
	time.Sleep(200 * time.Millisecond) // nothing may come back
	var attempts []int
	rec.mu.Lock()
	for _, d := range rec.seen {
		attempts = append(attempts, d.Attempt)
	}
	rec.mu.Unlock()
	if !slices.Equal(attempts, []int{1, 2, 3, 4}) {
		t.Fatalf("attempts %v, want [1 2 3 4]", attempts)
	}
	if got := testutil.ToFloat64(c.metrics.retries); got != maxAttempts-1 {
		t.Errorf("retries_total = %v, want %d", got, maxAttempts-1)
	}
	if got := testutil.ToFloat64(c.metrics.failures); got != maxAttempts {
		t.Errorf("failures_total = %v, want %d", got, maxAttempts)
	}
}

func TestConsumerKeepsFlowingBehindPoison(t *testing.T) {
	t.Parallel()
	topo := testTopology(t, time.Second) // the poison waits 1 s between attempts
	conn := dialTest(t, topo)
	rec := &recorder{fn: func(d Delivery) error {
		if d.MessageID == "poison" {
			return errors.New("cannot handle this one yet")
		}
		return nil
	}}
	startConsumer(t, conn, ConsumerConfig{
		Queue: topo.Queues[0].Name, Workers: 1, Prefetch: 1, MaxAttempts: 2, RetryDelays: topo.Queues[0].RetryDelays,
	}, rec.handle)

	msgs := append([]Message{{RoutingKey: testKey, MessageID: "poison", Body: []byte(`{}`)}}, messages(50, "good")...)
	publishAll(t, conn, topo.Exchange, msgs)
	eventually(t, 10*time.Second, "good messages", func() bool {
		return rec.count(func(d Delivery) bool { return d.MessageID != "poison" }) == 50
	})
	if n := rec.count(func(d Delivery) bool { return d.MessageID == "poison" }); n != 1 {
		t.Fatalf("poison handled %d times before the good ones finished, want 1", n)
	}
	d := getOne(t, rawChannel(t), topo.Queues[0].DeadLetterQueue, 10*time.Second)
	if d.MessageId != "poison" {
		t.Fatalf("dead letter %q", d.MessageId)
	}
}

func TestConsumerSurvivesConnectionLoss(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	rec := &recorder{}
	startConsumer(t, conn, ConsumerConfig{Queue: topo.Queues[0].Name}, rec.handle)

	publishAll(t, conn, topo.Exchange, messages(10, "before"))
	eventually(t, 10*time.Second, "first messages", func() bool { return rec.count(nil) >= 10 })
	if !conn.breakConnection() {
		t.Fatal("no socket to break")
	}
	pub := NewPublisher(conn, topo.Exchange)
	defer pub.Close()
	after := messages(10, "after")
	eventually(t, 20*time.Second, "publish after reconnect", func() bool {
		_, err := pub.PublishBatch(t.Context(), after, 2*time.Second)
		return err == nil
	})
	eventually(t, 20*time.Second, "messages after reconnect", func() bool {
		ids := rec.ids()
		for _, m := range after {
			if ids[m.MessageID] == 0 {
				return false
			}
		}
		return true
	})
}

// An operator deleted the consumer's queue, its dead-letter queue and its
// retry queues: the broker cancels the subscription, and the consumer
// declares its topology again at once and subscribes again, with nobody
// else declaring anything.
func TestConsumerRecreatesADeletedQueue(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTestOptions(t, topo, Options{RedeclareInterval: -1}) // no periodic help
	rec := &recorder{}
	c, _ := startConsumer(t, conn, ConsumerConfig{Queue: topo.Queues[0].Name, RetryDelays: topo.Queues[0].RetryDelays}, rec.handle)
	publishAll(t, conn, topo.Exchange, messages(1, "first"))
	eventually(t, 10*time.Second, "first message", func() bool { return rec.count(nil) == 1 })

	raw := rawChannel(t)
	// All but the unroutable queue, the consumed queue last: its deletion
	// cancels the subscription, which makes the consumer declare them all.
	queues := topo.QueueNames()[1:]
	slices.Reverse(queues)
	for _, q := range queues {
		if _, err := raw.QueueDelete(q, false, false, false); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the queues declared again", func() bool {
		for _, q := range topo.QueueNames() {
			if _, err := rawChannel(t).QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
				return false
			}
		}
		return true
	})
	eventually(t, 10*time.Second, "the consumer ready again", func() bool { return c.Ready() == nil })
	publishAll(t, conn, topo.Exchange, messages(1, "second"))
	eventually(t, 10*time.Second, "message after re-subscribe", func() bool { return rec.ids()["second-0"] == 1 })
}

// A queue deleted while other processes keep declaring it (as relays and the
// consumer's own connection do) is often declared again before the
// subscribing channel learns of the deletion: RabbitMQ 3.10 then keeps the
// channel subscribed to the new queue and hands it deliveries it never
// passes on, and sends no cancel. The consumer gets nothing for
// IdleResubscribe, subscribes again on a new channel, and the stranded
// deliveries come back to it.
func TestConsumerResubscribesWhenTheBrokerStopsServingIt(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	rec := &recorder{}
	startConsumer(t, conn, ConsumerConfig{Queue: topo.Queues[0].Name, RetryDelays: topo.Queues[0].RetryDelays,
		IdleResubscribe: time.Second}, rec.handle)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range 6 {
		declarer := dialTestOptions(t, topo, Options{RedeclareInterval: -1})
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = declarer.Redeclare(ctx)
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	pub := NewPublisher(conn, topo.Exchange)
	defer pub.Close()
	raw := rawChannel(t)
	for i := range 5 {
		if i > 0 {
			if _, err := raw.QueueDelete(topo.Queues[0].Name, false, false, false); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		round := "round" + itoa(i)
		if n, err := pub.PublishBatch(t.Context(), messages(3, round), 10*time.Second); err != nil {
			t.Fatalf("publish: confirmed %d: %v", n, err)
		}
		eventually(t, 10*time.Second, round+" consumed", func() bool { return rec.ids()[round+"-2"] == 1 })
	}
}

// The queue is missing when the consumer subscribes (404 NOT_FOUND): the
// consumer declares it instead of failing in a loop, and is ready only once
// it is subscribed.
func TestConsumerDeclaresAQueueMissingAtSubscribe(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTestOptions(t, topo, Options{RedeclareInterval: -1})
	if _, err := rawChannel(t).QueueDelete(topo.Queues[0].Name, false, false, false); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	c, err := NewConsumer(conn, ConsumerConfig{Queue: topo.Queues[0].Name, DeadLetterQueue: topo.Queues[0].DeadLetterQueue,
		RetryDelays: topo.Queues[0].RetryDelays}, rec.handle, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ready() == nil {
		t.Fatal("Ready() = nil before Run subscribed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, 10*time.Second, "the consumer subscribed", func() bool { return c.Ready() == nil })
	publishAll(t, conn, topo.Exchange, messages(1, "declared"))
	eventually(t, 10*time.Second, "the message", func() bool { return rec.ids()["declared-0"] == 1 })
}

// An operator deleted the exchange, which takes the bindings with it: the
// publisher declares the exchange again and publishes again in the same call,
// and the consumer's connection binds its queue again within its
// RedeclareInterval.
func TestExchangeAndBindingsComeBackAfterTheExchangeIsDeleted(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	consumerConn := dialTestOptions(t, topo, Options{RedeclareInterval: 200 * time.Millisecond})
	producerView := topo
	producerView.Queues = nil // a producer that knows no consuming queue
	producerConn := dialTestOptions(t, producerView, Options{RedeclareInterval: -1})
	rec := &recorder{}
	startConsumer(t, consumerConn, ConsumerConfig{Queue: topo.Queues[0].Name, RetryDelays: topo.Queues[0].RetryDelays}, rec.handle)
	pub := NewPublisher(producerConn, topo.Exchange)
	t.Cleanup(func() { _ = pub.Close() })

	if err := rawChannel(t).ExchangeDelete(topo.Exchange, false, false); err != nil {
		t.Fatal(err)
	}
	if n, err := pub.PublishBatch(t.Context(), messages(3, "repaired"), 10*time.Second); err != nil || n != 3 {
		t.Fatalf("publish after the exchange was deleted: confirmed %d, %v; want the exchange declared again", n, err)
	}
	eventually(t, 10*time.Second, "a message through the binding declared again", func() bool {
		if _, err := pub.PublishBatch(t.Context(), messages(1, "later"), 10*time.Second); err != nil {
			t.Fatalf("publish: %v", err)
		}
		return rec.ids()["later-0"] > 0
	})
}

// A handler whose dependency is down does not spend attempts: the consumer
// pauses, says so in Ready and a metric, keeps the deliveries in the queue,
// and handles every one of them at its first attempt once Probe succeeds.
func TestConsumerPausesWhileADependencyIsUnavailable(t *testing.T) {
	t.Parallel()
	topo := testTopology(t) // two retry levels of 50 ms
	conn := dialTest(t, topo)
	var down atomic.Bool
	down.Store(true)
	handled := &recorder{}
	calls := atomic.Int32{}
	handler := func(ctx context.Context, d Delivery) error {
		calls.Add(1)
		if down.Load() {
			return fmt.Errorf("insert: %w: connection refused", ErrUnavailable)
		}
		return handled.handle(ctx, d)
	}
	logs := &testkit.Logs{}
	cfg := ConsumerConfig{
		Queue: topo.Queues[0].Name, DeadLetterQueue: topo.Queues[0].DeadLetterQueue, MaxAttempts: 2, RetryDelays: topo.Queues[0].RetryDelays,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Probe: func(context.Context) error {
			if down.Load() {
				return errors.New("ping: connection refused")
			}
			return nil
		},
	}
	c, err := NewConsumer(conn, cfg, handler, jsonLogger(logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	msgs := messages(20, "outage")
	publishAll(t, conn, topo.Exchange, msgs)
	eventually(t, 10*time.Second, "the pause", func() bool { return errors.Is(c.Ready(), ErrPaused) })
	if r := c.Ready(); !strings.Contains(r.Error(), "connection refused") {
		t.Errorf("Ready() = %v, want the cause", r)
	}
	if got := testutil.ToFloat64(c.metrics.paused); got != 1 {
		t.Errorf("amqp_consumer_paused = %v, want 1", got)
	}
	// Longer than every retry delay together: nothing may be dead-lettered,
	// and a paused consumer takes no deliveries.
	time.Sleep(time.Second)
	before := calls.Load()
	time.Sleep(500 * time.Millisecond)
	if after := calls.Load(); after != before {
		t.Errorf("the handler ran %d times while paused", after-before)
	}
	if n := readyMessages(t, topo.Queues[0].DeadLetterQueue); n != 0 {
		t.Fatalf("%d messages dead-lettered during the outage", n)
	}

	down.Store(false)
	eventually(t, 20*time.Second, "every message handled", func() bool { return len(handled.ids()) == len(msgs) })
	eventually(t, 10*time.Second, "ready again", func() bool { return c.Ready() == nil })
	if n := handled.count(func(d Delivery) bool { return d.Attempt != 1 }); n != 0 {
		t.Errorf("%d deliveries counted the outage as an attempt", n)
	}
	if n := readyMessages(t, topo.Queues[0].DeadLetterQueue); n != 0 {
		t.Errorf("%d messages dead-lettered", n)
	}
	if got := testutil.ToFloat64(c.metrics.paused); got != 0 {
		t.Errorf("amqp_consumer_paused = %v after the resume, want 0", got)
	}
	l := logs.String()
	if strings.Count(l, "amqp consumer paused") != 1 || strings.Count(l, `"msg":"amqp consumer resumed"`) != 1 || !strings.Contains(l, `"paused_ms":`) {
		t.Errorf("want one WARN line for the pause and one for the resume with paused_ms:\n%s", l)
	}
}

func TestConsumerShutdownFinishesInFlightHandler(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	started := make(chan struct{})
	var ctxErr error
	handler := func(ctx context.Context, d Delivery) error {
		close(started)
		time.Sleep(300 * time.Millisecond) // a transaction in progress
		ctxErr = ctx.Err()
		return nil
	}
	c, stop := startConsumer(t, conn, ConsumerConfig{Queue: topo.Queues[0].Name}, handler)
	publishAll(t, conn, topo.Exchange, messages(1, "slow"))
	<-started
	stop() // returns after the handler finished
	if ctxErr != nil {
		t.Fatalf("handler ctx cancelled during shutdown: %v", ctxErr)
	}
	if got := testutil.ToFloat64(c.metrics.processed); got != 1 {
		t.Fatalf("processed_total = %v, want 1", got)
	}
	if n := readyMessages(t, topo.Queues[0].Name); n != 0 {
		t.Fatalf("%d messages back in the queue: the in-flight one was not acked", n)
	}
}

func TestConsumerShutdownGraceIsBounded(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	started := make(chan struct{})
	handler := func(ctx context.Context, d Delivery) error {
		close(started)
		<-ctx.Done() // a handler stuck until its ctx ends
		return ctx.Err()
	}
	_, stop := startConsumer(t, conn, ConsumerConfig{Queue: topo.Queues[0].Name, ShutdownTimeout: 100 * time.Millisecond}, handler)
	publishAll(t, conn, topo.Exchange, messages(1, "stuck"))
	<-started
	stop()
}

func TestAttemptOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   any
		want int
	}{{nil, 1}, {int32(3), 3}, {int64(7), 7}, {"4", 4}, {int32(0), 1}, {int32(-2), 1}, {"x", 1}, {1.5, 1}} {
		if got := AttemptOf(tc.in); got != tc.want {
			t.Errorf("AttemptOf(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestNoGoroutineLeak is not parallel: it runs before the parallel tests
// resume, so the goroutine count is its own.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		topo := testTopology(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := DialOptions(ctx, amqpURL(t), topo, testLogger(t), Options{MinBackoff: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rec := &recorder{fn: func(d Delivery) error {
			if d.MessageID == "leak-0" && d.Attempt == 1 {
				return errors.New("retry me")
			}
			return nil
		}}
		_, stop := startConsumer(t, conn, ConsumerConfig{Queue: topo.Queues[0].Name, RetryDelays: topo.Queues[0].RetryDelays}, rec.handle)
		publishAll(t, conn, topo.Exchange, messages(20, "leak"))
		eventually(t, 10*time.Second, "deliveries", func() bool { return rec.count(nil) >= 21 })
		conn.breakConnection()
		pub := NewPublisher(conn, topo.Exchange)
		eventually(t, 10*time.Second, "publish after reconnect", func() bool {
			_, err := pub.PublishBatch(t.Context(), messages(5, "leak2"), 2*time.Second)
			return err == nil
		})
		_ = pub.Close()
		eventually(t, 10*time.Second, "deliveries after reconnect", func() bool { return rec.count(nil) >= 26 })
		stop()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An operator deleted the retry queue: the consumer declares it again and the
// retry still happens, instead of requeueing the delivery in a loop.
func TestConsumerRedeclaresAMissingRetryQueue(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	q := topo.Queues[0]
	if _, err := rawChannel(t).QueueDelete(RetryQueueName(q.Name, q.RetryDelays[0]), false, false, false); err != nil {
		t.Fatalf("delete retry queue: %v", err)
	}
	rec := &recorder{fn: func(d Delivery) error {
		if d.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}}
	startConsumer(t, conn, ConsumerConfig{Queue: q.Name, MaxAttempts: 3, RetryDelays: q.RetryDelays}, rec.handle)
	publishAll(t, conn, topo.Exchange, messages(1, "retry-path"))
	eventually(t, 10*time.Second, "the second attempt succeeds", func() bool {
		return rec.count(func(d Delivery) bool { return d.Attempt == 2 }) == 1
	})
	if n := rec.count(func(d Delivery) bool { return d.Attempt == 1 }); n != 1 {
		t.Fatalf("first attempt delivered %d times, want 1 (no requeue loop)", n)
	}
}

// attrError is a handler error that names its event, as the inbox's do.
type attrError struct{ id string }

func (e attrError) Error() string { return "handler failed" }
func (e attrError) LogAttrs() []slog.Attr {
	return []slog.Attr{slog.String("event_id", e.id)}
}

// TestConsumerLogsEachFailureOnceWithItsEvent: every failed attempt is one log line
// (the retry, then the dead letter), each carrying the handler error's attributes.
func TestConsumerLogsEachFailureOnceWithItsEvent(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	logs := &testkit.Logs{}
	c, err := NewConsumer(conn, ConsumerConfig{
		Queue: topo.Queues[0].Name, DeadLetterQueue: topo.Queues[0].DeadLetterQueue, MaxAttempts: 2, RetryDelays: topo.Queues[0].RetryDelays,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}, func(_ context.Context, d Delivery) error {
		return fmt.Errorf("apply: %w", attrError{id: "ev-" + d.MessageID})
	},
		jsonLogger(logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	msg := messages(1, "named")[0]
	publishAll(t, conn, topo.Exchange, []Message{msg})
	getOne(t, rawChannel(t), topo.Queues[0].DeadLetterQueue, 10*time.Second)
	// The consumer logs the dead letter once the broker confirmed the copy,
	// which may be after the copy is already in the queue.
	eventually(t, 10*time.Second, "the dead-letter line", func() bool {
		return strings.Contains(logs.String(), `"msg":"dead-lettered"`)
	})
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "retrying later") || !strings.Contains(lines[1], `"msg":"dead-letter`) {
		t.Fatalf("want one retry line and one dead-letter line, got:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if !strings.Contains(l, `"event_id":"ev-`+msg.MessageID+`"`) {
			t.Errorf("line lacks the event_id: %s", l)
		}
	}
}
