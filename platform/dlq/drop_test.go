package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
)

// inboxConsumer is the fixture's consumer on the real inbox (inbox.Consumer, the
// content hash of inbox.ContentSum): applied counts each event's effect, committed
// with its key; duplicates are read from inbox_duplicates_total.
type inboxConsumer struct {
	mu      sync.Mutex
	applied map[string]int
	broken  atomic.Bool
	reg     *prometheus.Registry
}

// consumeInbox runs a consumer of the fixture's queue through the real inbox, failing
// every event while broken is set (then dead-lettered at attempt 2, with a record),
// and makes the dlq commands run as the maintenance role, with its grants only.
func (f *fixture) consumeInbox(t *testing.T) *inboxConsumer {
	t.Helper()
	u, err := url.Parse(f.cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-crole=test_maintenance")
	u.RawQuery = q.Encode()
	f.cfg.DatabaseURL = u.String()

	ic := &inboxConsumer{applied: map[string]int{}, reg: prometheus.NewRegistry()}
	ic.broken.Store(true)
	ib := inbox.NewConsumer(inbox.Config{Name: "tester", Registerer: ic.reg})
	f.consumeWith(t, func(ctx context.Context, d amqp.Delivery) error {
		if ic.broken.Load() {
			return errors.New("reserve line 1: product is unknown")
		}
		var env contracts.Envelope
		if err := json.Unmarshal(d.Body, &env); err != nil {
			return err
		}
		content, err := env.MarshalJSON() // its SHA-256 is inbox.ContentSum(env)
		if err != nil {
			return err
		}
		_, err = ib.Handle(ctx, f.pool, inbox.Message{Key: env.EventID.String(), Content: content},
			func(ctx context.Context, tx pgx.Tx) (any, error) {
				ic.mu.Lock()
				defer ic.mu.Unlock()
				ic.applied[env.EventID.String()]++
				return nil, nil
			})
		return err
	})
	return ic
}

func (ic *inboxConsumer) count(id uuid.UUID) int {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.applied[id.String()]
}

func (ic *inboxConsumer) duplicates(t *testing.T) float64 {
	t.Helper()
	mfs, err := ic.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "inbox_duplicates_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// outcome is the processed_event row of id: "processed", "dropped" or "none".
func (f *fixture) outcome(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var o *string
	err := f.pool.QueryRow(t.Context(), `SELECT coalesce(outcome, 'processed') FROM processed_event WHERE consumer = 'tester' AND message_key = $1`,
		id.String()).Scan(&o)
	if err != nil {
		return "none"
	}
	return *o
}

// deadLetterInbox dead-letters one event through the inbox consumer, then fixes it.
func (f *fixture) deadLetterInbox(t *testing.T, ic *inboxConsumer) (uuid.UUID, amqp.Message) {
	t.Helper()
	id, m := event(time.Now())
	f.publish(t, m)
	eventually(t, "the dead letter", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 1 })
	ic.broken.Store(false) // the cause is fixed
	return id, m
}

// TestDropIsFinal: a dropped event, delivered again through the exchange (as the
// producer's replay-outbox sends it), is skipped by the consumer's inbox as a
// duplicate and never applied; replay without --force refuses it.
func TestDropIsFinal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ic := f.consumeInbox(t)
	id, m := f.deadLetterInbox(t, ic)

	out, err := f.run(t, "drop", id.String())
	if err != nil || !strings.Contains(out, "1 dropped") || !strings.Contains(out, "inbox key written as dropped") {
		t.Errorf("drop = %q, %v", out, err)
	}
	if r, o := f.resolution(t, id.String()), f.outcome(t, id); r != "dropped" || o != "dropped" {
		t.Errorf("after drop: dead letter %s, inbox key %s; want dropped, dropped", r, o)
	}
	f.publish(t, m) // replay-outbox's copy
	eventually(t, "the copy handled", func() bool { return ic.duplicates(t) == 1 || ic.count(id) > 0 })
	if n := ic.count(id); n != 0 {
		t.Fatalf("the dropped event was applied %d times", n)
	}

	out, err = f.run(t, "replay", id.String())
	if err == nil || !strings.HasPrefix(out, "refused") || !strings.Contains(out, "dlq undrop "+id.String()) {
		t.Errorf("replay of a dropped one = %q, %v; want refused, pointing at undrop", out, err)
	}
	if n := f.depth(t, f.cfg.Queue); n != 0 || f.resolution(t, id.String()) != "dropped" {
		t.Errorf("refused replay: %d in the queue, dead letter %s", n, f.resolution(t, id.String()))
	}
}

// TestUndropThenReplayAppliesOnce: undrop --dry-run changes nothing; undrop deletes
// the dropped key and reopens the dead letter; replay applies the event once, and a
// later copy is a duplicate.
func TestUndropThenReplayAppliesOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ic := f.consumeInbox(t)
	id, m := f.deadLetterInbox(t, ic)
	if out, err := f.run(t, "drop", id.String()); err != nil {
		t.Fatalf("drop = %q, %v", out, err)
	}

	out, err := f.run(t, "undrop", "--dry-run", id.String())
	if err != nil || !strings.HasPrefix(out, "would reopen") || !strings.Contains(out, "dry run") {
		t.Errorf("undrop --dry-run = %q, %v", out, err)
	}
	if r, o := f.resolution(t, id.String()), f.outcome(t, id); r != "dropped" || o != "dropped" {
		t.Fatalf("dry run changed something: dead letter %s, inbox key %s", r, o)
	}
	out, err = f.run(t, "undrop", id.String())
	if err != nil || !strings.HasPrefix(out, "reopened") || !strings.Contains(out, "dlq replay "+id.String()) {
		t.Fatalf("undrop = %q, %v", out, err)
	}
	if r, o := f.resolution(t, id.String()), f.outcome(t, id); r != "open" || o != "none" {
		t.Fatalf("after undrop: dead letter %s, inbox key %s; want open, none", r, o)
	}
	if out, err := f.run(t, "undrop", id.String()); err != nil || !strings.HasPrefix(out, "not dropped") {
		t.Errorf("undrop of an open one = %q, %v", out, err)
	}

	if out, err := f.run(t, "replay", id.String()); err != nil || !strings.HasPrefix(out, "replayed") {
		t.Fatalf("replay = %q, %v", out, err)
	}
	eventually(t, "the replayed event applied", func() bool { return ic.count(id) == 1 })
	f.publish(t, m)
	eventually(t, "a later copy skipped", func() bool { return ic.duplicates(t) == 1 })
	if n, o := ic.count(id), f.outcome(t, id); n != 1 || o != "processed" {
		t.Errorf("applied %d times, inbox key %s; want once, processed", n, o)
	}
}

// TestUndropKeepsAProcessedKey: an event whose copy the consumer applied before the
// operator dropped its dead letter keeps its key: drop says so, undrop refuses to
// delete it and the dead letter stays dropped.
func TestUndropKeepsAProcessedKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ic := f.consumeInbox(t)
	id, m := f.deadLetterInbox(t, ic)
	f.publish(t, m) // another copy, applied
	eventually(t, "the copy applied", func() bool { return ic.count(id) == 1 })

	if out, err := f.run(t, "drop", id.String()); err != nil || !strings.Contains(out, "already there") {
		t.Fatalf("drop = %q, %v", out, err)
	}
	out, err := f.run(t, "undrop", id.String())
	if err == nil || !strings.HasPrefix(out, "refused") || !strings.Contains(out, "the consumer processed it") {
		t.Errorf("undrop = %q, %v; want refused: processed", out, err)
	}
	if r, o := f.resolution(t, id.String()), f.outcome(t, id); r != "dropped" || o != "processed" {
		t.Errorf("after undrop: dead letter %s, inbox key %s; want dropped, processed", r, o)
	}
}

// TestReplayForceUndropsAndReplays: replay --force of a dropped dead letter says it
// undrops it (--dry-run: would, and changes nothing), then applies it once.
func TestReplayForceUndropsAndReplays(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ic := f.consumeInbox(t)
	id, _ := f.deadLetterInbox(t, ic)
	if out, err := f.run(t, "drop", id.String()); err != nil {
		t.Fatalf("drop = %q, %v", out, err)
	}

	out, err := f.run(t, "replay", "--dry-run", "--force", id.String())
	if err != nil || !strings.HasPrefix(out, "would undrop") || !strings.Contains(out, "would replay") || !strings.Contains(out, VerdictApply) {
		t.Errorf("replay --dry-run --force = %q, %v", out, err)
	}
	if r, o := f.resolution(t, id.String()), f.outcome(t, id); r != "dropped" || o != "dropped" {
		t.Fatalf("dry run changed something: dead letter %s, inbox key %s", r, o)
	}
	out, err = f.run(t, "replay", "--force", id.String())
	if err != nil || !strings.HasPrefix(out, "undropped") || !strings.Contains(out, "\nreplayed") {
		t.Fatalf("replay --force = %q, %v", out, err)
	}
	eventually(t, "the replayed event applied", func() bool { return ic.count(id) == 1 })
	if r := f.resolution(t, id.String()); r != "replayed" {
		t.Errorf("dead letter %s, want replayed", r)
	}
	eventually(t, "its key processed", func() bool { return f.outcome(t, id) == "processed" })
}
