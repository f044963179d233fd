package inboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/inbox/msgkey"
)

// testKeyWithoutHash checks that a key without a content hash (payload_sha256 NULL, as
// the keys written before the inbox took hashes) is a duplicate whatever the content,
// while a new event is processed and gets a hash.
func testKeyWithoutHash(t *testing.T, s *suite) {
	old := envelope(t)
	if _, err := s.pool.Exec(s.ctx, `INSERT INTO processed_event (consumer, message_key) VALUES ('c', $1)`, old.EventID.String()); err != nil {
		t.Fatalf("write a key without a hash: %v", err)
	}
	ib := s.inbox("c", nil)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))

	changed := old
	changed.CorrelationID = "another content"
	for _, env := range []contracts.Envelope{old, changed} {
		if dup, err := ib.Process(s.ctx, env); err != nil || !dup {
			t.Fatalf("event keyed without a hash: Process = %v, %v; want a duplicate (a NULL hash is content unknown)", dup, err)
		}
	}
	fresh := envelope(t)
	if dup, err := ib.Process(s.ctx, fresh); err != nil || dup {
		t.Fatalf("new event: Process = %v, %v; want processed", dup, err)
	}
	if e := s.effects(t, old.EventID); e != 0 {
		t.Errorf("effects of the old event = %d, want 0", e)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE message_key = $1 AND octet_length(payload_sha256) = 32`, fresh.EventID.String()); got != 1 {
		t.Errorf("new key rows with a hash = %d, want 1", got)
	}
}

func testEventConflict(t *testing.T, s *suite) {
	reg := prometheus.NewRegistry()
	ib := s.inbox("c", reg)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))
	env := envelope(t)
	if _, err := ib.Process(s.ctx, env); err != nil {
		t.Fatal(err)
	}
	other := env
	other.CorrelationID = "another request"
	_, err := ib.Process(s.ctx, other)
	var ce *inbox.ConflictError
	if !errors.As(err, &ce) || !inbox.Permanent(err) {
		t.Fatalf("same event_id, other content: err = %v; want a permanent *ConflictError", err)
	}
	if len(ce.Stored) != 32 || len(ce.Got) != 32 || bytes.Equal(ce.Stored, ce.Got) {
		t.Errorf("conflict hashes %x and %x; want two different SHA-256", ce.Stored, ce.Got)
	}
	if got := s.effects(t, env.EventID); got != 1 {
		t.Errorf("effects = %d, want 1", got)
	}
	if got := metric(t, reg, "inbox_conflicts_total"); got != 1 {
		t.Errorf("inbox_conflicts_total = %v, want 1", got)
	}
}

// testConcurrentConflict processes events at once with a copy and a conflicting copy
// of an event processed before and of one among them (in a group, with group commit).
func testConcurrentConflict(t *testing.T, s *suite) {
	reg := prometheus.NewRegistry()
	ib := s.inbox("c", reg)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))
	old := envelope(t)
	if _, err := ib.Process(s.ctx, old); err != nil {
		t.Fatal(err)
	}
	envs := make([]contracts.Envelope, 16)
	for n := range envs {
		envs[n] = envelope(t)
	}
	changed := func(env contracts.Envelope) contracts.Envelope {
		env.CorrelationID = "another content"
		return env
	}
	// A copy of old, a changed copy of old, and a changed copy of envs[0].
	all := append(append([]contracts.Envelope{}, envs...), old, changed(old), changed(envs[0]))
	errs := make([]error, len(all))
	dups := make([]bool, len(all))
	var wg sync.WaitGroup
	for n := range all {
		wg.Go(func() { dups[n], errs[n] = ib.Process(s.ctx, all[n]) })
	}
	wg.Wait()
	conflicts, duplicates := 0, 0
	for n, err := range errs {
		switch {
		case errors.Is(err, inbox.ErrConflict):
			conflicts++
		case err != nil:
			t.Errorf("event %d: %v", n, err)
		case dups[n]:
			duplicates++
		}
	}
	// Of envs[0] and its changed copy, whichever commits first is applied; the other
	// is a conflict. The copy of old is a duplicate, its changed copy a conflict.
	if conflicts != 2 || duplicates != 1 {
		t.Errorf("conflicts = %d, duplicates = %d; want 2, 1", conflicts, duplicates)
	}
	if got := s.count(t, `SELECT count(*) FROM inboxtest_effect`); got != len(envs)+1 {
		t.Errorf("effects = %d, want %d", got, len(envs)+1)
	}
	if got := metric(t, reg, "inbox_conflicts_total"); got != 2 {
		t.Errorf("inbox_conflicts_total = %v, want 2", got)
	}
}

// handleEffect returns a Func that records one effect for id and returns result.
func handleEffect(id uuid.UUID, calls *int, result any) inbox.Func {
	return func(ctx context.Context, tx pgx.Tx) (any, error) {
		*calls++
		_, err := tx.Exec(ctx, `INSERT INTO inboxtest_effect (event_id, handler) VALUES ($1, 0)`, id)
		return result, err
	}
}

func testModes(t *testing.T, s *suite) {
	reg := prometheus.NewRegistry()
	type answer struct{ N int }
	for _, mode := range []inbox.Mode{inbox.Skip, inbox.Fail, inbox.ReturnStored} {
		t.Run(mode.String(), func(t *testing.T) {
			c := inbox.NewConsumer(inbox.Config{Name: "c", Mode: mode, Registerer: reg})
			id := uuid.New()
			m := inbox.Message{Key: "mode " + id.String(), Content: []byte("body")}
			calls := 0
			first, err := c.Handle(s.ctx, s.pool, m, handleEffect(id, &calls, answer{1}))
			if err != nil || first.Duplicate {
				t.Fatalf("first: %+v, %v; want processed", first, err)
			}
			again, err := c.Handle(s.ctx, s.pool, m, handleEffect(id, &calls, answer{2}))
			switch mode {
			case inbox.Skip:
				if err != nil || !again.Duplicate || again.Result != nil {
					t.Errorf("again: %+v, %v; want a duplicate without result", again, err)
				}
			case inbox.Fail:
				if !errors.Is(err, inbox.ErrDuplicate) || inbox.Permanent(err) {
					t.Errorf("again: err = %v; want ErrDuplicate, not permanent", err)
				}
			case inbox.ReturnStored:
				var a, b answer
				if err != nil || !again.Duplicate || json.Unmarshal(first.Result, &a) != nil || json.Unmarshal(again.Result, &b) != nil || a.N != 1 || b.N != 1 {
					t.Errorf("first %s, again %+v, %v; want the first result both times", first.Result, again, err)
				}
			}
			if calls != 1 || s.effects(t, id) != 1 {
				t.Errorf("fn calls = %d, effects = %d; want 1, 1", calls, s.effects(t, id))
			}
		})
	}
	if p, d := metric(t, reg, "inbox_processed_total"), metric(t, reg, "inbox_duplicates_total"); p != 3 || d != 3 {
		t.Errorf("processed = %v, duplicates = %v; want 3, 3", p, d)
	}
}

func testContentCheck(t *testing.T, s *suite) {
	c := inbox.NewConsumer(inbox.Config{Name: "c"})
	id := uuid.New()
	calls := 0
	handle := func(content []byte) (inbox.Outcome, error) {
		return c.Handle(s.ctx, s.pool, inbox.Message{Key: "content", Content: content}, handleEffect(id, &calls, nil))
	}
	if out, err := handle([]byte("a")); err != nil || out.Duplicate {
		t.Fatalf("first: %+v, %v", out, err)
	}
	if out, err := handle([]byte("a")); err != nil || !out.Duplicate {
		t.Errorf("same content: %+v, %v; want a duplicate", out, err)
	}
	if out, err := handle(nil); err != nil || !out.Duplicate {
		t.Errorf("no content (no check): %+v, %v; want a duplicate", out, err)
	}
	if _, err := handle([]byte("b")); !errors.Is(err, inbox.ErrConflict) {
		t.Errorf("other content: err = %v; want ErrConflict", err)
	}
	if calls != 1 {
		t.Errorf("fn calls = %d, want 1", calls)
	}
}

func testJoin(t *testing.T, s *suite) {
	c := inbox.NewConsumer(inbox.Config{Name: "c"})
	boom := errors.New("boom")
	id := uuid.New()
	tx, err := s.pool.Begin(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(s.ctx) //nolint:errcheck // a no-op after the commit
	calls := 0
	if out, err := c.Handle(s.ctx, tx, inbox.Message{Key: "joined"}, handleEffect(id, &calls, nil)); err != nil || out.Duplicate {
		t.Fatalf("joined: %+v, %v; want processed", out, err)
	}
	if out, err := c.Handle(s.ctx, tx, inbox.Message{Key: "joined"}, handleEffect(id, &calls, nil)); err != nil || !out.Duplicate {
		t.Fatalf("joined again: %+v, %v; want a duplicate", out, err)
	}
	_, err = c.Handle(s.ctx, tx, inbox.Message{Key: "failing"}, func(ctx context.Context, tx pgx.Tx) (any, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO inboxtest_effect (event_id, handler) VALUES ($1, 9)`, id); err != nil {
			return nil, err
		}
		return nil, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing: err = %v, want boom", err)
	}
	if err := tx.Commit(s.ctx); err != nil {
		t.Fatalf("the caller's transaction must stay usable after a failing Handle: %v", err)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE message_key IN ('joined', 'failing')`); got != 1 {
		t.Errorf("keys = %d, want 1 (the failing one rolled back to its savepoint)", got)
	}
	if got := s.effects(t, id); got != 1 {
		t.Errorf("effects = %d, want 1", got)
	}
}

func testNoKey(t *testing.T, s *suite) {
	c := inbox.NewConsumer(inbox.Config{Name: "c"})
	calls := 0
	_, err := c.Handle(s.ctx, s.pool, inbox.Message{Content: []byte("x")}, handleEffect(uuid.New(), &calls, nil))
	if !errors.Is(err, inbox.ErrNoKey) || !inbox.Permanent(err) {
		t.Errorf("err = %v; want a permanent ErrNoKey", err)
	}
	if calls != 0 || s.count(t, `SELECT count(*) FROM processed_event`) != 0 {
		t.Errorf("fn calls = %d; want 0 and no key", calls)
	}
}

func testLongKey(t *testing.T, s *suite) {
	long := strings.Repeat("k", msgkey.MaxLen+1)
	calls := 0
	for range 2 {
		if _, err := inbox.Handle(s.ctx, s.pool, "c", long, handleEffect(uuid.New(), &calls, nil)); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := msgkey.Normalize(long)
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE message_key = $1`, want); got != 1 || calls != 1 || !strings.HasPrefix(want, msgkey.HashPrefix) {
		t.Errorf("rows with %s = %d, fn calls = %d; want 1, 1", want, got, calls)
	}
}
