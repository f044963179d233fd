// Package inboxtest is the acceptance suite of platform/inbox: it proves on a real
// PostgreSQL server that a schema's processed_event table (the inbox's own migrations,
// or a service's schema that lists them) gives exactly-once effects
// (docs/architecture.md, rule 3).
package inboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
	"example.com/shop/testkit"
)

// effectTable is created by the suite in each test database; its handler adds one row
// per run, so the row count is the number of effects.
const effectTable = `CREATE TABLE inboxtest_effect (
    event_id uuid NOT NULL,
    handler  int  NOT NULL
)`

// Run runs the inbox suite, each case in parallel on a fresh database migrated with
// schema (which must hold inbox.Migrations), with every Inbox built with opts. Its
// subtest Handle is RunStore on inbox.PostgresStore.
func Run(t *testing.T, schema migrate.Schema, opts ...inbox.Option) {
	t.Helper()
	t.Run("Handle", func(t *testing.T) {
		t.Parallel()
		RunStore(t, Postgres(schema))
	})
	cases := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"NewEventRunsEveryHandlerOnce", testNewEvent},
		{"KeyWithoutHashIsADuplicate", testKeyWithoutHash},
		{"DuplicateRunsNoHandler", testDuplicate},
		{"HandlerErrorRollsBackKeyAndEffect", testHandlerError},
		{"ConcurrentDuplicateWaitsThenSkips", testConcurrentCommit},
		{"ConcurrentDuplicateWaitsThenProcessesAfterRollback", testConcurrentRollback},
		{"RacingDuplicatesHaveOneEffectEach", testRacing},
		{"OneFailingEventAmongConcurrentOnesFailsAlone", testFailingAmongMany},
		{"GroupHandlerAppliesConcurrentEventsOnceAndFailsOneAlone", testGroupHandler},
		{"ConsumersAreIndependent", testConsumers},
		{"UnprocessableEventTouchesNothing", testUnprocessable},
		{"PurgeDeletesOnlyOldKeysOfTheConsumer", testPurge},
		{"SameEventIDOtherContentIsAConflict", testEventConflict},
		{"ConflictsAndDuplicatesAmongConcurrentEvents", testConcurrentConflict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool, _ := testkit.NewDatabase(t, schema)
			if _, err := pool.Exec(testkit.Context(t), effectTable); err != nil {
				t.Fatalf("create effect table: %v", err)
			}
			validator, err := contracts.NewValidator()
			if err != nil {
				t.Fatalf("validator: %v", err)
			}
			c.fn(t, &suite{pool: pool, validator: validator, ctx: testkit.Context(t), opts: opts})
		})
	}
}

type suite struct {
	pool      *pgxpool.Pool
	validator *contracts.Validator
	ctx       context.Context
	opts      []inbox.Option
}

func (s *suite) inbox(consumer string, reg prometheus.Registerer) *inbox.Inbox {
	return inbox.New(s.pool, consumer, s.validator, nil, reg, s.opts...)
}

// effect is a Handler that records one effect row tagged n.
func effect(n int) inbox.Handler[json.RawMessage] {
	return func(ctx context.Context, tx pgx.Tx, env inbox.Meta, payload json.RawMessage) error {
		_, err := tx.Exec(ctx, `INSERT INTO inboxtest_effect (event_id, handler) VALUES ($1, $2)`, env.EventID, n)
		return err
	}
}

func envelope(t *testing.T) contracts.Envelope {
	t.Helper()
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr-"+uuid.NewString(),
		contracts.OrderPlaced{
			OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
			Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}},
		}, time.Now())
	if err != nil {
		t.Fatalf("envelope: %v", err)
	}
	return env
}

func (s *suite) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(s.ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (s *suite) keys(t *testing.T, consumer string, id uuid.UUID) int {
	t.Helper()
	return s.count(t, `SELECT count(*) FROM processed_event WHERE consumer = $1 AND message_key = $2::text`, consumer, id.String())
}

func (s *suite) effects(t *testing.T, id uuid.UUID) int {
	t.Helper()
	return s.count(t, `SELECT count(*) FROM inboxtest_effect WHERE event_id = $1`, id)
}

func testNewEvent(t *testing.T, s *suite) {
	reg := prometheus.NewRegistry()
	ib := s.inbox("c", reg)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))
	inbox.On(ib, contracts.EventOrderPlaced, effect(2))
	env := envelope(t)

	dup, err := ib.Process(s.ctx, env)
	if err != nil || dup {
		t.Fatalf("Process = %v, %v; want false, nil", dup, err)
	}
	if got := s.keys(t, "c", env.EventID); got != 1 {
		t.Errorf("keys = %d, want 1", got)
	}
	if got := s.count(t, `SELECT count(DISTINCT handler) FROM inboxtest_effect WHERE event_id = $1`, env.EventID); got != 2 {
		t.Errorf("handlers run = %d, want 2", got)
	}
	if got := metric(t, reg, "inbox_processed_total"); got != 1 {
		t.Errorf("inbox_processed_total = %v, want 1", got)
	}
}

func testDuplicate(t *testing.T, s *suite) {
	reg := prometheus.NewRegistry()
	ib := s.inbox("c", reg)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))
	env := envelope(t)

	for n, want := range []bool{false, true, true} {
		dup, err := ib.Process(s.ctx, env)
		if err != nil || dup != want {
			t.Fatalf("Process #%d = %v, %v; want %v, nil", n+1, dup, err, want)
		}
	}
	if got := s.keys(t, "c", env.EventID); got != 1 {
		t.Errorf("keys = %d, want 1", got)
	}
	if got := s.effects(t, env.EventID); got != 1 {
		t.Errorf("effects = %d, want 1", got)
	}
	if got := metric(t, reg, "inbox_duplicates_total"); got != 2 {
		t.Errorf("inbox_duplicates_total = %v, want 2", got)
	}
}

func testHandlerError(t *testing.T, s *suite) {
	boom := errors.New("boom")
	fail := true
	ib := s.inbox("c", nil)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))
	inbox.On(ib, contracts.EventOrderPlaced, func(ctx context.Context, tx pgx.Tx, env inbox.Meta, payload json.RawMessage) error {
		if fail {
			return boom
		}
		return nil
	})
	env := envelope(t)

	dup, err := ib.Process(s.ctx, env)
	if !errors.Is(err, boom) || dup {
		t.Fatalf("Process = %v, %v; want false and an error wrapping boom", dup, err)
	}
	if k, e := s.keys(t, "c", env.EventID), s.effects(t, env.EventID); k != 0 || e != 0 {
		t.Fatalf("after the failure: keys = %d, effects = %d; want 0, 0 (rolled back together)", k, e)
	}

	fail = false
	if dup, err := ib.Process(s.ctx, env); err != nil || dup {
		t.Fatalf("retry: Process = %v, %v; want false, nil", dup, err)
	}
	if k, e := s.keys(t, "c", env.EventID), s.effects(t, env.EventID); k != 1 || e != 1 {
		t.Fatalf("after the retry: keys = %d, effects = %d; want 1, 1", k, e)
	}
}

// blockingFirst returns a Handler that records an effect and, on its first call only,
// signals entered and waits for release (holding the transaction and its key open),
// then returns result.
func blockingFirst(entered chan<- struct{}, release <-chan struct{}, result error) inbox.Handler[json.RawMessage] {
	var once sync.Once
	return func(ctx context.Context, tx pgx.Tx, env inbox.Meta, payload json.RawMessage) error {
		if err := effect(1)(ctx, tx, env, payload); err != nil {
			return err
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		close(entered)
		<-release
		return result
	}
}

// waitForLockWait returns once a backend of this database waits on a lock while
// inserting into processed_event, i.e. a second Process is blocked behind the first.
func (s *suite) waitForLockWait(t *testing.T) {
	t.Helper()
	const q = `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO processed_event%'`
	deadline := time.Now().Add(30 * time.Second)
	for s.count(t, q) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second Process never waited on the first one's key")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type outcome struct {
	dup bool
	err error
}

func (s *suite) concurrent(t *testing.T, firstResult error) (first, second outcome, env contracts.Envelope) {
	t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	ib := s.inbox("c", nil)
	inbox.On(ib, contracts.EventOrderPlaced, blockingFirst(entered, release, firstResult))
	env = envelope(t)

	firstDone, secondDone := make(chan outcome, 1), make(chan outcome, 1)
	go func() {
		dup, err := ib.Process(s.ctx, env)
		firstDone <- outcome{dup, err}
	}()
	<-entered
	go func() {
		dup, err := ib.Process(s.ctx, env)
		secondDone <- outcome{dup, err}
	}()
	s.waitForLockWait(t)
	select {
	case o := <-secondDone:
		t.Fatalf("the second Process returned %+v while the first still held the key", o)
	default:
	}
	close(release)
	return <-firstDone, <-secondDone, env
}

func testConcurrentCommit(t *testing.T, s *suite) {
	first, second, env := s.concurrent(t, nil)
	if first.err != nil || first.dup {
		t.Errorf("first = %+v; want processed", first)
	}
	if second.err != nil || !second.dup {
		t.Errorf("second = %+v; want a duplicate", second)
	}
	if k, e := s.keys(t, "c", env.EventID), s.effects(t, env.EventID); k != 1 || e != 1 {
		t.Errorf("keys = %d, effects = %d; want 1, 1", k, e)
	}
}

func testConcurrentRollback(t *testing.T, s *suite) {
	boom := errors.New("boom")
	first, second, env := s.concurrent(t, boom)
	if !errors.Is(first.err, boom) {
		t.Errorf("first = %+v; want the handler's error", first)
	}
	if second.err != nil || second.dup {
		t.Errorf("second = %+v; want processed (the first rolled its key back)", second)
	}
	if k, e := s.keys(t, "c", env.EventID), s.effects(t, env.EventID); k != 1 || e != 1 {
		t.Errorf("keys = %d, effects = %d; want 1, 1", k, e)
	}
}

func testRacing(t *testing.T, s *suite) {
	const goroutines, events = 8, 30
	ib := s.inbox("c", nil)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))
	envs := make([]contracts.Envelope, events)
	for n := range envs {
		envs[n] = envelope(t)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	processed := 0
	for range goroutines {
		wg.Go(func() {
			for _, env := range envs {
				dup, err := ib.Process(s.ctx, env)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if !dup {
					processed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("racing Process calls failed (none may, SQLSTATE 25P02 included): %v", err)
	}
	if processed != events {
		t.Errorf("processed = %d, want %d", processed, events)
	}
	if got := s.count(t, `SELECT count(*) FROM inboxtest_effect`); got != events {
		t.Errorf("effects = %d, want %d", got, events)
	}
	if got := s.count(t, `SELECT count(DISTINCT event_id) FROM inboxtest_effect`); got != events {
		t.Errorf("distinct events with an effect = %d, want %d", got, events)
	}
}

func testFailingAmongMany(t *testing.T, s *suite) {
	const events = 24
	boom := errors.New("boom")
	envs := make([]contracts.Envelope, events)
	for n := range envs {
		envs[n] = envelope(t)
	}
	bad := envs[events/2].EventID
	ib := s.inbox("c", nil)
	inbox.On(ib, contracts.EventOrderPlaced, effect(1))
	inbox.On(ib, contracts.EventOrderPlaced, func(_ context.Context, _ pgx.Tx, env inbox.Meta, _ json.RawMessage) error {
		if env.EventID == bad {
			return boom
		}
		return nil
	})
	errs := make([]error, events)
	var wg sync.WaitGroup
	for n := range envs {
		wg.Go(func() { _, errs[n] = ib.Process(s.ctx, envs[n]) })
	}
	wg.Wait()
	for n, err := range errs {
		if envs[n].EventID == bad {
			if !errors.Is(err, boom) {
				t.Errorf("failing event: err = %v, want boom", err)
			}
		} else if err != nil {
			t.Errorf("event %d: %v", n, err)
		}
	}
	if k, e := s.count(t, `SELECT count(*) FROM processed_event`), s.count(t, `SELECT count(*) FROM inboxtest_effect`); k != events-1 || e != events-1 {
		t.Errorf("keys = %d, effects = %d; want %d each", k, e, events-1)
	}
	if k, e := s.keys(t, "c", bad), s.effects(t, bad); k != 0 || e != 0 {
		t.Errorf("failing event: keys = %d, effects = %d; want 0, 0", k, e)
	}
}

// testGroupHandler processes 24 events twice each, concurrently, through a
// GroupHandler (called with one event at a time without group commit, with several
// with it) that refuses one of them with EventFailed: each other event is applied
// once, and both copies of the refused one fail with its permanent error.
func testGroupHandler(t *testing.T, s *suite) {
	const events = 24
	envs := make([]contracts.Envelope, events)
	for n := range envs {
		envs[n] = envelope(t)
	}
	bad := envs[events/3].EventID
	ib := s.inbox("c", nil)
	inbox.OnGroup(ib, contracts.EventOrderPlaced, func(ctx context.Context, tx pgx.Tx, group []inbox.Event[json.RawMessage]) error {
		ids := make([]uuid.UUID, len(group))
		for n, env := range group {
			if env.EventID == bad {
				return inbox.EventFailed(n, fmt.Errorf("refused: %w", inbox.ErrPermanent))
			}
			ids[n] = env.EventID
		}
		_, err := tx.Exec(ctx, `INSERT INTO inboxtest_effect (event_id, handler) SELECT unnest($1::uuid[]), 1`, ids)
		return err
	})
	errs := make([]error, 2*events)
	var wg sync.WaitGroup
	for n := range errs {
		wg.Go(func() { _, errs[n] = ib.Process(s.ctx, envs[n%events]) })
	}
	wg.Wait()
	for n, err := range errs {
		if envs[n%events].EventID == bad {
			if !inbox.Permanent(err) {
				t.Errorf("refused event: err = %v, want a permanent error", err)
			}
		} else if err != nil {
			t.Errorf("event %d: %v", n%events, err)
		}
	}
	if k, e := s.count(t, `SELECT count(*) FROM processed_event`), s.count(t, `SELECT count(*) FROM inboxtest_effect`); k != events-1 || e != events-1 {
		t.Errorf("keys = %d, effects = %d; want %d each", k, e, events-1)
	}
	if got := s.count(t, `SELECT count(DISTINCT event_id) FROM inboxtest_effect`); got != events-1 {
		t.Errorf("distinct events with an effect = %d, want %d", got, events-1)
	}
}

func testConsumers(t *testing.T, s *suite) {
	a, b := s.inbox("a", nil), s.inbox("b", nil)
	inbox.On(a, contracts.EventOrderPlaced, effect(1))
	inbox.On(b, contracts.EventOrderPlaced, effect(2))
	env := envelope(t)
	for _, ib := range []*inbox.Inbox{a, b, a, b} {
		if _, err := ib.Process(s.ctx, env); err != nil {
			t.Fatalf("Process(%s): %v", ib.Consumer(), err)
		}
	}
	if ka, kb := s.keys(t, "a", env.EventID), s.keys(t, "b", env.EventID); ka != 1 || kb != 1 {
		t.Errorf("keys a = %d, b = %d; want 1 each", ka, kb)
	}
	if got := s.effects(t, env.EventID); got != 2 {
		t.Errorf("effects = %d, want 2 (one per consumer)", got)
	}
}

func testUnprocessable(t *testing.T, s *suite) {
	ib := s.inbox("c", nil)
	inbox.On(ib, contracts.EventOrderCancelled, effect(1))

	env := envelope(t) // order.order.placed.v1 has no handler
	if _, err := ib.Process(s.ctx, env); !errors.Is(err, inbox.ErrNoHandler) {
		t.Errorf("no handler: err = %v, want ErrNoHandler", err)
	}
	noID := envelope(t)
	noID.EventName = contracts.EventOrderCancelled
	noID.EventID = uuid.Nil
	if _, err := ib.Process(s.ctx, noID); !errors.Is(err, inbox.ErrNoEventID) {
		t.Errorf("nil event id: err = %v, want ErrNoEventID", err)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event`); got != 0 {
		t.Errorf("keys = %d, want 0", got)
	}
}

func testPurge(t *testing.T, s *suite) {
	// More old keys than one chunk, so Purge must loop.
	old := inbox.PurgeChunk + 7
	seed := func(consumer string, n int, age string) {
		t.Helper()
		_, err := s.pool.Exec(s.ctx, `INSERT INTO processed_event (consumer, message_key, processed_at)
SELECT $1, gen_random_uuid()::text, now() - $3::interval FROM generate_series(1, $2)`, consumer, n, age)
		if err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	seed("c", old, "10 days")
	seed("c", 5, "1 hour")
	seed("other", 3, "10 days")

	if _, err := inbox.Purge(s.ctx, s.pool, "c", 0); err == nil {
		t.Error("Purge with a zero horizon succeeded; want an error")
	}
	n, err := inbox.Purge(s.ctx, s.pool, "c", 7*24*time.Hour)
	if err != nil || n != int64(old) {
		t.Fatalf("Purge = %d, %v; want %d, nil", n, err, old)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE consumer = 'c'`); got != 5 {
		t.Errorf("recent keys left = %d, want 5", got)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE consumer = 'other'`); got != 3 {
		t.Errorf("other consumer's keys left = %d, want 3", got)
	}
	n, err = inbox.Purge(s.ctx, s.pool, "", 7*24*time.Hour)
	if err != nil || n != 3 {
		t.Errorf("Purge of every consumer = %d, %v; want 3, nil", n, err)
	}
}

// metric returns the sum of the series name{consumer="c"} in reg (over the other
// labels, such as reason); the test fails when there is none.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	found := false
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == "c" {
					sum += m.GetCounter().GetValue()
					found = true
				}
			}
		}
	}
	if !found {
		t.Fatalf("metric %s{consumer=\"c\"} not registered", name)
	}
	return sum
}
