package inboxtest

import (
	"bytes"
	"errors"
	"io/fs"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/testkit"
)

// KeyMigration is the goose version of the migration that turns processed_event's
// uuid event_id into the text message_key with payload_sha256 and result. Run needs
// migrations below it (the old schema) to prove that keys written before it stay
// duplicates after it.
const KeyMigration = 10

// before returns the migrations of fsys whose version is below version.
func before(t *testing.T, fsys fs.FS, version int) fs.FS {
	t.Helper()
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	old := fstest.MapFS{}
	for _, name := range files {
		var v int
		for _, c := range name {
			if c < '0' || c > '9' {
				break
			}
			v = v*10 + int(c-'0')
		}
		if v >= version {
			continue
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		old[name] = &fstest.MapFile{Data: b}
	}
	if len(old) == 0 {
		t.Fatalf("no migration below %05d: the suite needs the old processed_event schema to migrate from", version)
	}
	return old
}

// testOldKeys writes keys with the old schema (event_id uuid, no hash), migrates,
// and checks that those events are duplicates whatever their content, while new
// events are processed and get a hash.
func testOldKeys(t *testing.T, migrations fs.FS, opts []inbox.Option) {
	pool, url := testkit.NewDatabase(t, before(t, migrations, KeyMigration))
	ctx := testkit.Context(t)
	old := envelope(t)
	if _, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, event_id) VALUES ('c', $1)`, old.EventID); err != nil {
		t.Fatalf("write a key with the old schema: %v", err)
	}
	if _, err := migrate.Up(ctx, url, migrations); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pool.Reset() // connections may hold plans of the old column type
	if _, err := pool.Exec(ctx, effectTable); err != nil {
		t.Fatalf("create effect table: %v", err)
	}
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{pool: pool, validator: v, ctx: ctx, opts: opts}
	ib := s.inbox("c", nil)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))

	changed := old
	changed.CorrelationID = "another content"
	for _, env := range []contracts.Envelope{old, changed} {
		if dup, err := ib.Process(ctx, env); err != nil || !dup {
			t.Fatalf("event keyed by the old schema: Process = %v, %v; want a duplicate (a NULL hash is content unknown)", dup, err)
		}
	}
	fresh := envelope(t)
	if dup, err := ib.Process(ctx, fresh); err != nil || dup {
		t.Fatalf("new event: Process = %v, %v; want processed", dup, err)
	}
	if e := s.effects(t, old.EventID); e != 0 {
		t.Errorf("effects of the old event = %d, want 0", e)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE message_key = $1 AND payload_sha256 IS NULL`, old.EventID.String()); got != 1 {
		t.Errorf("old key rows without a hash = %d, want 1", got)
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
