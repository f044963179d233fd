package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConsumerDeadLettersACopyThatSaysWhy: with DeadLetterQueue set, a
// delivery that fails for good is recorded first (OnDeadLetter sees an empty
// dead-letter queue), then copied to the dead-letter queue with x-last-error,
// x-attempt and x-dead-lettered-at, and the original is acked.
func TestConsumerDeadLettersACopyThatSaysWhy(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	q := topo.Queues[0]
	conn := dialTest(t, topo)
	inspect := rawChannel(t)
	rec := &recorder{fn: func(Delivery) error { return errors.New("reserve line 1: product 42 is unknown") }}
	var recorded []DeadLetter
	var dlqAtRecord atomic.Int64
	onDL := func(_ context.Context, dl DeadLetter) error {
		recorded = append(recorded, dl)
		dlqAtRecord.Store(int64(readyMessages(t, q.DeadLetterQueue)))
		return nil
	}
	c, _ := startConsumer(t, conn, ConsumerConfig{
		Queue: q.Name, MaxAttempts: 2, RetryDelays: q.RetryDelays, DeadLetterQueue: q.DeadLetterQueue, OnDeadLetter: onDL,
	}, rec.handle)

	before := time.Now().UTC().Add(-time.Second)
	msg := messages(1, "poison")[0]
	publishAll(t, conn, topo.Exchange, []Message{msg})
	d := getOne(t, inspect, q.DeadLetterQueue, 10*time.Second)

	if string(d.Body) != string(msg.Body) || d.MessageId != msg.MessageID || d.Type != msg.Type ||
		d.Headers["correlation_id"] != msg.Headers["correlation_id"] {
		t.Fatalf("dead-lettered copy changed the message: %+v", d)
	}
	if got := d.Headers[HeaderLastError]; got != "reserve line 1: product 42 is unknown" {
		t.Errorf("%s = %v", HeaderLastError, got)
	}
	if got := AttemptOf(d.Headers[HeaderAttempt]); got != 2 {
		t.Errorf("%s = %v, want 2", HeaderAttempt, d.Headers[HeaderAttempt])
	}
	at, err := time.Parse(DeadLetterTimeFormat, fmt.Sprint(d.Headers[HeaderDeadLetteredAt]))
	if err != nil || at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("%s = %v (%v)", HeaderDeadLetteredAt, d.Headers[HeaderDeadLetteredAt], err)
	}
	if len(recorded) != 1 || recorded[0].Attempts != 2 || recorded[0].Delivery.MessageID != msg.MessageID ||
		!recorded[0].At.Equal(at) {
		t.Errorf("recorded %+v", recorded)
	}
	if n := dlqAtRecord.Load(); n != 0 {
		t.Errorf("the dead-letter queue held %d messages when the dead letter was recorded, want 0", n)
	}
	eventually(t, 5*time.Second, "original acked", func() bool { return readyMessages(t, q.Name) == 0 })
	// The counter follows the dead-letter queue's confirm, a moment after the copy
	// can be read there.
	eventually(t, 5*time.Second, "dead_lettered_total 1", func() bool { return testutil.ToFloat64(c.metrics.deadLettered) == 1 })
}

// TestConsumerKeepsTheDeliveryWhenRecordingFails: a failed OnDeadLetter (the
// database is down) is no reason to lose or drop the message; it is requeued
// and dead-lettered once the record succeeds, exactly once.
func TestConsumerKeepsTheDeliveryWhenRecordingFails(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	q := topo.Queues[0]
	conn := dialTest(t, topo)
	var calls atomic.Int32
	onDL := func(context.Context, DeadLetter) error {
		if calls.Add(1) <= 2 {
			return errors.New("connection refused")
		}
		return nil
	}
	rec := &recorder{fn: func(Delivery) error { return fmt.Errorf("decode: %w", ErrPermanent) }}
	startConsumer(t, conn, ConsumerConfig{
		Queue: q.Name, RetryDelays: q.RetryDelays, DeadLetterQueue: q.DeadLetterQueue, OnDeadLetter: onDL,
	}, rec.handle)

	publishAll(t, conn, topo.Exchange, messages(1, "later"))
	d := getOne(t, rawChannel(t), q.DeadLetterQueue, 15*time.Second)
	if !strings.HasPrefix(fmt.Sprint(d.Headers[HeaderLastError]), "decode: permanent failure") || calls.Load() != 3 {
		t.Fatalf("dead letter %v after %d record calls", d.Headers, calls.Load())
	}
	time.Sleep(300 * time.Millisecond)
	if n := readyMessages(t, q.DeadLetterQueue) + readyMessages(t, q.Name); n != 0 {
		t.Errorf("%d more copies in the queues, want none", n)
	}
}

func TestCut(t *testing.T) {
	t.Parallel()
	if got := cut("héllo", 2); got != "h" {
		t.Errorf("cut = %q", got)
	}
	if got := cut("abc", 5); got != "abc" {
		t.Errorf("cut = %q", got)
	}
}
