package inboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/inbox"
	"example.com/shop/platform/inbox/msgkey"
	"example.com/shop/testkit"
)

// EffectTable is the table the store suite's handlers write to, one row per
// effect; its DDL is the same on PostgreSQL and MySQL.
const EffectTable = `CREATE TABLE inboxtest_effect (
    message_id varchar(100) NOT NULL,
    worker     int          NOT NULL
)`

// Store describes one database engine to RunStore and RunRace: how to get a
// database, and the few statements whose SQL differs between engines. Queries
// given to Count and Exec use ? placeholders; a PostgreSQL Store rewrites them.
type Store[DB, Tx any] struct {
	// Store is the inbox store under test.
	Store inbox.Store[DB, Tx]
	// NewDatabase returns a fresh database, migrated so that it holds
	// processed_event, dropped when t ends, and the DSN RunRace's processes
	// open it with.
	NewDatabase func(t testing.TB) (db DB, dsn string)
	// Open connects to the database of dsn (in a race process); close releases it.
	Open func(ctx context.Context, dsn string) (db DB, close func(), err error)
	// Exec runs a statement on db.
	Exec func(ctx context.Context, db DB, query string, args ...any) error
	// Count runs a query returning one integer on db.
	Count func(ctx context.Context, db DB, query string, args ...any) (int, error)
	// ExecTx runs a statement in tx.
	ExecTx func(ctx context.Context, tx Tx, query string, args ...any) error
	// Begin opens a transaction on db for a test that joins it; Commit ends it.
	Begin  func(ctx context.Context, db DB) (Tx, error)
	Commit func(ctx context.Context, tx Tx) error
	// Rollback ends a transaction Begin opened (a no-op after Commit).
	Rollback func(ctx context.Context, tx Tx)
	// LockWaits counts the sessions of db's database waiting for a row lock on
	// processed_event.
	LockWaits func(ctx context.Context, db DB) (int, error)
	// SeedKeys inserts n keys of consumer processed age ago.
	SeedKeys func(ctx context.Context, db DB, consumer string, n int, age time.Duration) error
	// Purge is the store's purge of keys older than olderThan.
	Purge func(ctx context.Context, db DB, consumer string, olderThan time.Duration) (int64, error)
}

// RunStore runs the suite of inbox.StoreConsumer on one store, each case in
// parallel on a database of its own: the contract of Consumer.Handle that every
// store keeps (docs/architecture.md, rule 3).
func RunStore[DB, Tx any](t *testing.T, st Store[DB, Tx]) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, s *storeSuite[DB, Tx])
	}{
		{"NewMessageRunsOnceAndCopiesAreDuplicates", testStoreDuplicate[DB, Tx]},
		{"FailureRollsBackKeyAndEffect", testStoreFailure[DB, Tx]},
		{"ConcurrentDuplicateWaitsThenSkips", testStoreWaitCommit[DB, Tx]},
		{"ConcurrentDuplicateWaitsThenProcessesAfterRollback", testStoreWaitRollback[DB, Tx]},
		{"TwoWaitersAfterARollbackApplyOnce", testStoreTwoWaiters[DB, Tx]},
		{"RacingDuplicatesHaveOneEffectEach", testStoreRacing[DB, Tx]},
		{"ConsumersAreIndependent", testStoreConsumers[DB, Tx]},
		{"KeysAreComparedByteForByte", testStoreKeyBytes[DB, Tx]},
		{"Modes", testStoreModes[DB, Tx]},
		{"ContentCheck", testStoreContent[DB, Tx]},
		{"JoinsTheCallersTransaction", testStoreJoin[DB, Tx]},
		{"WithoutKeyTouchesNothing", testStoreNoKey[DB, Tx]},
		{"LongKeysAreStoredAsTheirHash", testStoreLongKey[DB, Tx]},
		{"PurgeDeletesOnlyOldKeysOfTheConsumer", testStorePurge[DB, Tx]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, _ := st.NewDatabase(t)
			s := &storeSuite[DB, Tx]{st: st, db: db, ctx: testkit.Context(t)}
			if err := st.Exec(s.ctx, db, EffectTable); err != nil {
				t.Fatalf("create effect table: %v", err)
			}
			c.fn(t, s)
		})
	}
}

type storeSuite[DB, Tx any] struct {
	st  Store[DB, Tx]
	db  DB
	ctx context.Context
}

func (s *storeSuite[DB, Tx]) consumer(name string, mode inbox.Mode, reg prometheus.Registerer) *inbox.StoreConsumer[DB, Tx] {
	return inbox.NewStoreConsumer(s.st.Store, inbox.Config{Name: name, Mode: mode, Registerer: reg})
}

func (s *storeSuite[DB, Tx]) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	n, err := s.st.Count(s.ctx, s.db, query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (s *storeSuite[DB, Tx]) keys(t *testing.T, consumer, key string) int {
	t.Helper()
	return s.count(t, `SELECT count(*) FROM processed_event WHERE consumer = ? AND message_key = ?`, consumer, key)
}

func (s *storeSuite[DB, Tx]) effects(t *testing.T, id string) int {
	t.Helper()
	return s.count(t, `SELECT count(*) FROM inboxtest_effect WHERE message_id = ?`, id)
}

// effect returns a handler that records one effect of id and returns result.
func (s *storeSuite[DB, Tx]) effect(id string, calls *int, result any) inbox.TxFunc[Tx] {
	var mu sync.Mutex
	return func(ctx context.Context, tx Tx) (any, error) {
		mu.Lock()
		*calls++
		mu.Unlock()
		return result, s.st.ExecTx(ctx, tx, `INSERT INTO inboxtest_effect (message_id, worker) VALUES (?, 0)`, id)
	}
}

func testStoreDuplicate[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	reg := prometheus.NewRegistry()
	c := s.consumer("c", inbox.Skip, reg)
	m := inbox.Message{Key: "m-" + uuid.NewString(), Content: []byte(`{"n":1}`)}
	calls := 0
	for n, want := range []bool{false, true, true} {
		out, err := c.Handle(s.ctx, s.db, m, s.effect(m.Key, &calls, nil))
		if err != nil || out.Duplicate != want {
			t.Fatalf("Handle #%d = %+v, %v; want Duplicate %v", n+1, out, err, want)
		}
	}
	if k, e := s.keys(t, "c", m.Key), s.effects(t, m.Key); k != 1 || e != 1 || calls != 1 {
		t.Errorf("keys = %d, effects = %d, fn calls = %d; want 1 each", k, e, calls)
	}
	if p, d := metric(t, reg, "inbox_processed_total"), metric(t, reg, "inbox_duplicates_total"); p != 1 || d != 2 {
		t.Errorf("processed = %v, duplicates = %v; want 1, 2", p, d)
	}
}

func testStoreFailure[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	reg := prometheus.NewRegistry()
	c := s.consumer("c", inbox.Skip, reg)
	boom := errors.New("boom")
	m := inbox.Message{Key: "m-" + uuid.NewString()}
	calls := 0
	_, err := c.Handle(s.ctx, s.db, m, func(ctx context.Context, tx Tx) (any, error) {
		if _, err := s.effect(m.Key, &calls, nil)(ctx, tx); err != nil {
			return nil, err
		}
		return nil, boom
	})
	if !errors.Is(err, boom) || inbox.Permanent(err) {
		t.Fatalf("failing fn: err = %v; want boom, not permanent", err)
	}
	if k, e := s.keys(t, "c", m.Key), s.effects(t, m.Key); k != 0 || e != 0 {
		t.Fatalf("after the failure: keys = %d, effects = %d; want 0, 0 (rolled back together)", k, e)
	}
	if out, err := c.Handle(s.ctx, s.db, m, s.effect(m.Key, &calls, nil)); err != nil || out.Duplicate {
		t.Fatalf("next delivery: %+v, %v; want processed", out, err)
	}
	if k, e := s.keys(t, "c", m.Key), s.effects(t, m.Key); k != 1 || e != 1 {
		t.Errorf("after the next delivery: keys = %d, effects = %d; want 1, 1", k, e)
	}
	if f := metric(t, reg, "inbox_failures_total"); f != 1 {
		t.Errorf("inbox_failures_total = %v, want 1", f)
	}
}

// waitForLockWaits returns once n sessions wait on a processed_event row lock;
// a copy that returns from done meanwhile did not wait, a failure.
func (s *storeSuite[DB, Tx]) waitForLockWaits(t *testing.T, n int, done <-chan storeOutcome) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case o := <-done:
			t.Fatalf("a copy returned %+v while the first still held the key", o)
		default:
		}
		got, err := s.st.LockWaits(s.ctx, s.db)
		if err != nil {
			t.Fatalf("lock waits: %v", err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait on the first one's key after 30s, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type storeOutcome struct {
	out inbox.Outcome
	err error
}

// held runs a first Handle of key that records its effect and then holds its
// transaction until release is closed, returning result; then waiters more
// Handles of key, each started once the previous ones wait on the key.
func (s *storeSuite[DB, Tx]) held(t *testing.T, key string, waiters int, result error) (first storeOutcome, rest []storeOutcome) {
	t.Helper()
	c := s.consumer("c", inbox.Skip, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	firstDone := make(chan storeOutcome, 1)
	calls := 0
	go func() {
		out, err := c.Handle(s.ctx, s.db, inbox.Message{Key: key}, func(ctx context.Context, tx Tx) (any, error) {
			if _, err := s.effect(key, &calls, nil)(ctx, tx); err != nil {
				return nil, err
			}
			close(entered)
			<-release
			return nil, result
		})
		firstDone <- storeOutcome{out, err}
	}()
	<-entered
	done := make(chan storeOutcome, waiters)
	var waiterCalls int
	for n := range waiters {
		go func() {
			out, err := c.Handle(s.ctx, s.db, inbox.Message{Key: key}, s.effect(key, &waiterCalls, nil))
			done <- storeOutcome{out, err}
		}()
		s.waitForLockWaits(t, n+1, done)
	}
	select {
	case o := <-done:
		t.Fatalf("a copy returned %+v while the first still held the key", o)
	default:
	}
	close(release)
	first = <-firstDone
	for range waiters {
		rest = append(rest, <-done)
	}
	return first, rest
}

func testStoreWaitCommit[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	key := "m-" + uuid.NewString()
	first, rest := s.held(t, key, 1, nil)
	if first.err != nil || first.out.Duplicate {
		t.Errorf("first = %+v; want processed", first)
	}
	if second := rest[0]; second.err != nil || !second.out.Duplicate {
		t.Errorf("second = %+v; want a duplicate", second)
	}
	if k, e := s.keys(t, "c", key), s.effects(t, key); k != 1 || e != 1 {
		t.Errorf("keys = %d, effects = %d; want 1, 1", k, e)
	}
}

func testStoreWaitRollback[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	key := "m-" + uuid.NewString()
	boom := errors.New("boom")
	first, rest := s.held(t, key, 1, boom)
	if !errors.Is(first.err, boom) {
		t.Errorf("first = %+v; want fn's error", first)
	}
	if second := rest[0]; second.err != nil || second.out.Duplicate {
		t.Errorf("second = %+v; want processed (the first rolled its key back)", second)
	}
	if k, e := s.keys(t, "c", key), s.effects(t, key); k != 1 || e != 1 {
		t.Errorf("keys = %d, effects = %d; want 1, 1", k, e)
	}
}

// testStoreTwoWaiters: two copies wait on a first that rolls back. On InnoDB the
// two waiters deadlock over the freed key; the victim's transaction is rolled back
// before its fn ran and must come back as a duplicate, never as an error.
func testStoreTwoWaiters[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	key := "m-" + uuid.NewString()
	boom := errors.New("boom")
	first, rest := s.held(t, key, 2, boom)
	if !errors.Is(first.err, boom) {
		t.Errorf("first = %+v; want fn's error", first)
	}
	processed, dups := 0, 0
	for _, o := range rest {
		switch {
		case o.err != nil:
			t.Errorf("waiter: %v; want processed or a duplicate", o.err)
		case o.out.Duplicate:
			dups++
		default:
			processed++
		}
	}
	if processed != 1 || dups != 1 {
		t.Errorf("waiters: %d processed, %d duplicates; want 1, 1", processed, dups)
	}
	if k, e := s.keys(t, "c", key), s.effects(t, key); k != 1 || e != 1 {
		t.Errorf("keys = %d, effects = %d; want 1, 1", k, e)
	}
}

func testStoreRacing[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	const goroutines, messages = 8, 30
	c := s.consumer("c", inbox.Skip, nil)
	keys := make([]string, messages)
	for n := range keys {
		keys[n] = "m-" + uuid.NewString()
	}
	var mu sync.Mutex
	var errs []error
	processed := 0
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for _, key := range keys {
				calls := 0
				out, err := c.Handle(s.ctx, s.db, inbox.Message{Key: key, Content: []byte(key)}, s.effect(key, &calls, nil))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if !out.Duplicate {
					processed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("racing Handle calls failed (none may): %v", err)
	}
	if processed != messages {
		t.Errorf("processed = %d, want %d", processed, messages)
	}
	if e, d := s.count(t, `SELECT count(*) FROM inboxtest_effect`), s.count(t, `SELECT count(DISTINCT message_id) FROM inboxtest_effect`); e != messages || d != messages {
		t.Errorf("effects = %d over %d messages, want %d over %d", e, d, messages, messages)
	}
}

func testStoreConsumers[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	a, b := s.consumer("a", inbox.Skip, nil), s.consumer("b", inbox.Skip, nil)
	key := "m-" + uuid.NewString()
	calls := 0
	for _, c := range []*inbox.StoreConsumer[DB, Tx]{a, b, a, b} {
		if _, err := c.Handle(s.ctx, s.db, inbox.Message{Key: key}, s.effect(key, &calls, nil)); err != nil {
			t.Fatalf("Handle(%s): %v", c.Name(), err)
		}
	}
	if ka, kb := s.keys(t, "a", key), s.keys(t, "b", key); ka != 1 || kb != 1 || calls != 2 {
		t.Errorf("keys a = %d, b = %d, fn calls = %d; want 1, 1, 2 (one per consumer)", ka, kb, calls)
	}
}

// testStoreKeyBytes: keys that a case-insensitive or PAD SPACE collation would
// take for one are different messages.
func testStoreKeyBytes[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	c := s.consumer("c", inbox.Skip, nil)
	calls := 0
	for _, key := range []string{"Key", "key", "key ", "kéy", "KÉY"} {
		out, err := c.Handle(s.ctx, s.db, inbox.Message{Key: key}, s.effect(key, &calls, nil))
		if err != nil || out.Duplicate {
			t.Errorf("key %q: %+v, %v; want processed", key, out, err)
		}
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event`); got != 5 || calls != 5 {
		t.Errorf("keys = %d, fn calls = %d; want 5, 5", got, calls)
	}
}

func testStoreModes[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	reg := prometheus.NewRegistry()
	type answer struct{ N int }
	for _, mode := range []inbox.Mode{inbox.Skip, inbox.Fail, inbox.ReturnStored} {
		t.Run(mode.String(), func(t *testing.T) {
			c := s.consumer("c", mode, reg)
			key := "mode " + uuid.NewString()
			m := inbox.Message{Key: key, Content: []byte("body")}
			calls := 0
			first, err := c.Handle(s.ctx, s.db, m, s.effect(key, &calls, answer{1}))
			if err != nil || first.Duplicate {
				t.Fatalf("first: %+v, %v; want processed", first, err)
			}
			again, err := c.Handle(s.ctx, s.db, m, s.effect(key, &calls, answer{2}))
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
			if calls != 1 || s.effects(t, key) != 1 {
				t.Errorf("fn calls = %d, effects = %d; want 1, 1", calls, s.effects(t, key))
			}
		})
	}
	if p, d := metric(t, reg, "inbox_processed_total"), metric(t, reg, "inbox_duplicates_total"); p != 3 || d != 3 {
		t.Errorf("processed = %v, duplicates = %v; want 3, 3", p, d)
	}
}

func testStoreContent[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	reg := prometheus.NewRegistry()
	c := s.consumer("c", inbox.Skip, reg)
	calls := 0
	handle := func(content []byte) (inbox.Outcome, error) {
		return c.Handle(s.ctx, s.db, inbox.Message{Key: "content", Content: content}, s.effect("content", &calls, nil))
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
	_, err := handle([]byte("b"))
	var ce *inbox.ConflictError
	if !errors.As(err, &ce) || !inbox.Permanent(err) || len(ce.Stored) != 32 || len(ce.Got) != 32 {
		t.Errorf("other content: err = %v; want a permanent *ConflictError with two SHA-256", err)
	}
	// A key stored without a hash is content unknown: never a conflict.
	if out, err := c.Handle(s.ctx, s.db, inbox.Message{Key: "unknown"}, s.effect("unknown", &calls, nil)); err != nil || out.Duplicate {
		t.Fatalf("key without content: %+v, %v", out, err)
	}
	if out, err := c.Handle(s.ctx, s.db, inbox.Message{Key: "unknown", Content: []byte("x")}, s.effect("unknown", &calls, nil)); err != nil || !out.Duplicate {
		t.Errorf("content for a key stored without a hash: %+v, %v; want a duplicate", out, err)
	}
	if calls != 2 {
		t.Errorf("fn calls = %d, want 2", calls)
	}
	if got := metric(t, reg, "inbox_conflicts_total"); got != 1 {
		t.Errorf("inbox_conflicts_total = %v, want 1", got)
	}
}

func testStoreJoin[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	c := s.consumer("c", inbox.Skip, nil)
	boom := errors.New("boom")
	tx, err := s.st.Begin(s.ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.st.Rollback(s.ctx, tx)
	var db any = tx
	joined, ok := db.(DB)
	if !ok {
		t.Fatalf("%T is not a DB of the store: Handle cannot join it", tx)
	}
	calls := 0
	if out, err := c.Handle(s.ctx, joined, inbox.Message{Key: "joined"}, s.effect("joined", &calls, nil)); err != nil || out.Duplicate {
		t.Fatalf("joined: %+v, %v; want processed", out, err)
	}
	if out, err := c.Handle(s.ctx, joined, inbox.Message{Key: "joined"}, s.effect("joined", &calls, nil)); err != nil || !out.Duplicate {
		t.Fatalf("joined again: %+v, %v; want a duplicate", out, err)
	}
	_, err = c.Handle(s.ctx, joined, inbox.Message{Key: "failing"}, func(ctx context.Context, tx Tx) (any, error) {
		if err := s.st.ExecTx(ctx, tx, `INSERT INTO inboxtest_effect (message_id, worker) VALUES ('failing', 9)`); err != nil {
			return nil, err
		}
		return nil, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failing: err = %v, want boom", err)
	}
	if err := s.st.ExecTx(s.ctx, tx, `INSERT INTO inboxtest_effect (message_id, worker) VALUES ('caller', 1)`); err != nil {
		t.Fatalf("the caller's transaction must stay usable after a failing Handle: %v", err)
	}
	if err := s.st.Commit(s.ctx, tx); err != nil {
		t.Fatalf("commit the caller's transaction: %v", err)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE message_key IN ('joined', 'failing')`); got != 1 {
		t.Errorf("keys = %d, want 1 (the failing one rolled back to its savepoint)", got)
	}
	if j, f, c := s.effects(t, "joined"), s.effects(t, "failing"), s.effects(t, "caller"); j != 1 || f != 0 || c != 1 {
		t.Errorf("effects joined = %d, failing = %d, caller's own = %d; want 1, 0, 1", j, f, c)
	}
}

func testStoreNoKey[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	c := s.consumer("c", inbox.Skip, nil)
	calls := 0
	_, err := c.Handle(s.ctx, s.db, inbox.Message{Content: []byte("x")}, s.effect("none", &calls, nil))
	if !errors.Is(err, inbox.ErrNoKey) || !inbox.Permanent(err) {
		t.Errorf("err = %v; want a permanent ErrNoKey", err)
	}
	if calls != 0 || s.count(t, `SELECT count(*) FROM processed_event`) != 0 {
		t.Errorf("fn calls = %d; want 0 and no key", calls)
	}
}

func testStoreLongKey[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	c := s.consumer("c", inbox.Skip, nil)
	long := strings.Repeat("k", msgkey.MaxLen+1)
	calls := 0
	for range 2 {
		if _, err := c.Handle(s.ctx, s.db, inbox.Message{Key: long}, s.effect("long", &calls, nil)); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := msgkey.Normalize(long)
	if got := s.keys(t, "c", want); got != 1 || calls != 1 || !strings.HasPrefix(want, msgkey.HashPrefix) {
		t.Errorf("rows with %s = %d, fn calls = %d; want 1, 1", want, got, calls)
	}
	// The longest key kept as it is.
	edge := strings.Repeat("e", msgkey.MaxLen)
	if _, err := c.Handle(s.ctx, s.db, inbox.Message{Key: edge}, s.effect("edge", &calls, nil)); err != nil {
		t.Fatalf("a key of %d bytes: %v", msgkey.MaxLen, err)
	}
	if got := s.keys(t, "c", edge); got != 1 {
		t.Errorf("rows with the %d-byte key = %d, want 1", msgkey.MaxLen, got)
	}
}

func testStorePurge[DB, Tx any](t *testing.T, s *storeSuite[DB, Tx]) {
	old := inbox.PurgeChunk + 7 // more than one chunk, so Purge must loop
	for _, seed := range []struct {
		consumer string
		n        int
		age      time.Duration
	}{{"c", old, 240 * time.Hour}, {"c", 5, time.Hour}, {"other", 3, 240 * time.Hour}} {
		if err := s.st.SeedKeys(s.ctx, s.db, seed.consumer, seed.n, seed.age); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	if _, err := s.st.Purge(s.ctx, s.db, "c", 0); err == nil {
		t.Error("Purge with a zero horizon succeeded; want an error")
	}
	n, err := s.st.Purge(s.ctx, s.db, "c", 7*24*time.Hour)
	if err != nil || n != int64(old) {
		t.Fatalf("Purge = %d, %v; want %d, nil", n, err, old)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE consumer = 'c'`); got != 5 {
		t.Errorf("recent keys left = %d, want 5", got)
	}
	if got := s.count(t, `SELECT count(*) FROM processed_event WHERE consumer = 'other'`); got != 3 {
		t.Errorf("other consumer's keys left = %d, want 3", got)
	}
	if n, err := s.st.Purge(s.ctx, s.db, "", 7*24*time.Hour); err != nil || n != 3 {
		t.Errorf("Purge of every consumer = %d, %v; want 3, nil", n, err)
	}
}

// placeholders rewrites the ? placeholders of query as $1, $2, ... for PostgreSQL.
func placeholders(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
