package inboxtest

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
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
