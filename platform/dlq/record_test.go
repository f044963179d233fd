package dlq

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
)

// record writes a dead letter for m as the consumer does, and when copy is true also
// its copy in the dead-letter queue.
func (f *fixture) record(t *testing.T, m amqp.Message, copy bool) {
	t.Helper()
	dl := amqp.DeadLetter{Delivery: amqp.Delivery{Body: m.Body, MessageID: m.MessageID, Type: m.Type, RoutingKey: testKey,
		ContentType: "application/json", Headers: amqp091.Table{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		Reason: "boom", Attempts: 5, At: time.Now().UTC()}
	if err := Record(t.Context(), f.pool, "tester", dl); err != nil {
		t.Fatal(err)
	}
	if !copy {
		return
	}
	ch := rawChannel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", f.cfg.DeadLetterQueue, true, false, amqp091.Publishing{
		MessageId: m.MessageID, Type: m.Type, Body: m.Body, DeliveryMode: amqp091.Persistent, ContentType: "application/json",
		Headers: amqp091.Table{amqp.HeaderAttempt: int32(5), amqp.HeaderLastError: "boom"},
	})
	if err != nil || !dc.Wait() {
		t.Fatalf("copy to the dead-letter queue: %v", err)
	}
}

// TestReplayFromTheRecordWhenTheCopyIsGone: an event dead-lettered by the consumer
// whose copy is purged from the dead-letter queue is still listed (copy missing),
// shown and replayed from its record, and applied once; a second replay of it says
// it is already resolved and succeeds; drop works without a copy too.
func TestReplayFromTheRecordWhenTheCopyIsGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var mu sync.Mutex
	broken := true
	f.consume(t, func() bool { mu.Lock(); defer mu.Unlock(); return broken })
	id1, m1 := event(time.Now())
	id2, m2 := event(time.Now())
	f.publish(t, m1, m2)
	eventually(t, "2 dead letters", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 2 })
	if _, err := rawChannel(t).QueuePurge(f.cfg.DeadLetterQueue, false); err != nil {
		t.Fatal(err)
	}

	out, err := f.run(t, "list", "--json")
	var entries []Entry
	if err != nil || json.Unmarshal([]byte(out), &entries) != nil || len(entries) != 2 {
		t.Fatalf("list --json = %s, %v; want 2 entries", out, err)
	}
	for _, e := range entries {
		if !e.Recorded || e.InQueue || e.Attempts != 2 || !strings.Contains(e.Reason, "product is unknown") {
			t.Errorf("entry %+v; want recorded, not in the queue", e)
		}
	}
	if out, err := f.run(t, "list"); err != nil || !strings.Contains(out, "missing") || !strings.Contains(out, "2 without a copy") {
		t.Errorf("list = %q, %v", out, err)
	}
	out, err = f.run(t, "show", id1.String())
	if err != nil || !strings.Contains(out, `"event_id": "`+id1.String()) || !strings.Contains(out, `"in_queue": false`) ||
		!strings.Contains(out, `"content_type": "application/json"`) {
		t.Errorf("show = %s, %v", out, err)
	}

	mu.Lock()
	broken = false
	mu.Unlock()
	out, err = f.run(t, "replay", id1.String())
	if err != nil || !strings.HasPrefix(out, "replayed") || !strings.Contains(out, "no copy in "+f.cfg.DeadLetterQueue) {
		t.Fatalf("replay = %q, %v", out, err)
	}
	eventually(t, "the replayed event applied", func() bool { _, ok := f.inbox.Load(id1.String()); return ok })
	if r := f.resolution(t, id1.String()); r != "replayed" {
		t.Errorf("resolution = %s, want replayed", r)
	}
	out, err = f.run(t, "replay", id1.String())
	if err != nil || !strings.HasPrefix(out, "resolved") || !strings.Contains(out, "already replayed at") {
		t.Errorf("second replay = %q, %v; want resolved, already replayed, exit 0", out, err)
	}
	if out, err := f.run(t, "drop", id2.String()); err != nil || !strings.Contains(out, "1 dropped") {
		t.Errorf("drop = %q, %v", out, err)
	}
	if r := f.resolution(t, id2.String()); r != "dropped" {
		t.Errorf("resolution = %s, want dropped", r)
	}
	if _, ok := f.inbox.Load(id2.String()); ok {
		t.Error("the dropped event was applied")
	}
}

// TestConcurrentReplaysReplayEachOnce: four `dlq replay` runs over the same 16 ids
// (half with a copy in the dead-letter queue) put each message in the queue exactly
// once; every run succeeds, and the others say each id was taken or resolved.
func TestConcurrentReplaysReplayEachOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n, runs = 16, 4
	var ids []string
	for i := range n {
		id, m := event(time.Now())
		f.record(t, m, i%2 == 0)
		ids = append(ids, id.String())
	}
	outs := make([]string, runs)
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for r := range runs {
		wg.Go(func() { outs[r], errs[r] = f.run(t, append([]string{"replay"}, ids...)...) })
	}
	wg.Wait()
	verbs := map[string]int{}
	for r := range runs {
		if errs[r] != nil {
			t.Errorf("run %d: %v\n%s", r, errs[r], outs[r])
		}
		for _, l := range strings.Split(outs[r], "\n") {
			if f := strings.Fields(l); len(f) > 1 && len(f[1]) == 36 {
				verbs[f[0]]++
			}
		}
	}
	if verbs["replayed"] != n || verbs["taken"]+verbs["resolved"] != (runs-1)*n {
		t.Errorf("lines %v; want %d replayed and %d taken or resolved", verbs, n, (runs-1)*n)
	}
	got := map[string]int{}
	ch := rawChannel(t)
	for {
		d, ok, err := ch.Get(f.cfg.Queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got[d.MessageId]++
		if d.Headers["traceparent"] == nil || d.ContentType != "application/json" || d.Headers[amqp.HeaderAttempt] != nil {
			t.Errorf("replayed message %s: content_type %q, headers %v", d.MessageId, d.ContentType, d.Headers)
		}
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("event %s put in the queue %d times, want 1", id, got[id])
		}
	}
	if d := f.depth(t, f.cfg.DeadLetterQueue); d != 0 {
		t.Errorf("%d copies left in the dead-letter queue", d)
	}
}

// TestReplaySaysStale: an event the service calls stale (Config.Stale, reading
// through the replay's transaction) is reported "stale: will change nothing".
func TestReplaySaysStale(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stale, ms := event(time.Now())
	fresh, mf := event(time.Now())
	f.record(t, ms, false)
	f.record(t, mf, false)
	f.cfg.Stale = func(ctx context.Context, tx pgx.Tx, env contracts.Envelope) (string, error) {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			return "", err
		}
		if env.EventID == stale {
			return "order at version 3, the event carries version 2", nil
		}
		return "", nil
	}
	out, err := f.run(t, "replay", "--dry-run", "--all")
	if err != nil {
		t.Fatalf("replay --dry-run: %v\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(l, stale.String()) && !strings.Contains(l, "stale: will change nothing (order at version 3"):
			t.Errorf("stale event: %q", l)
		case strings.Contains(l, fresh.String()) && !strings.Contains(l, VerdictApply):
			t.Errorf("fresh event: %q", l)
		}
	}
	if !strings.Contains(out, "1 stale") {
		t.Errorf("summary: %q", out)
	}
}

// TestRecordWithoutItsMessage: a row written before the record kept the message is
// replayed from its queue copy; without one, replay refuses it and says how to
// recover, and drop still closes it.
func TestRecordWithoutItsMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := func() (uuid.UUID, amqp.Message) {
		id, m := event(time.Now())
		_, err := f.pool.Exec(t.Context(), `INSERT INTO dead_letter (consumer, message_key, event_id, event_name, reason, attempts)
VALUES ('tester', $1, $2, $3, 'boom', 5)`, id.String(), id, testKey)
		if err != nil {
			t.Fatal(err)
		}
		return id, m
	}
	withCopy, m := old()
	ch := rawChannel(t)
	if err := ch.Publish("", f.cfg.DeadLetterQueue, false, false, amqp091.Publishing{MessageId: m.MessageID, Type: m.Type, Body: m.Body}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the copy", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 1 })
	bare, _ := old()

	out, err := f.run(t, "replay", withCopy.String(), bare.String())
	if err == nil || !strings.Contains(out, "the record keeps no message") || !strings.Contains(out, "replay-outbox") {
		t.Errorf("replay = %q, %v; want the bare one refused", out, err)
	}
	if r := f.resolution(t, withCopy.String()); r != "replayed" || f.depth(t, f.cfg.Queue) != 1 {
		t.Errorf("with a copy: %s, %d in the queue; want replayed from the copy", r, f.depth(t, f.cfg.Queue))
	}
	if out, err := f.run(t, "drop", bare.String()); err != nil || f.resolution(t, bare.String()) != "dropped" {
		t.Errorf("drop = %q, %v", out, err)
	}
}
