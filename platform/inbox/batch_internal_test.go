package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/migrate"
	"example.com/shop/testkit"
)

// testRoles are the roles the inbox's grants name in this package's tests.
var testRoles = Roles{App: "test_app", Maintenance: "test_maintenance"}

// One group holding new events, copies within the group, copies of keys stored
// before (with and without a hash) and changed copies of each: every member gets
// the outcome Handle would give it alone.
func TestGroupCommitDecidesDuplicatesAndConflicts(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrate.Schema{Migrations(testRoles)})
	ctx := testkit.Context(t)
	ib := New(pool, "c", nil, nil, nil, WithGroupCommit(16, 1))
	applied := map[string]int{}
	On(ib, contracts.EventOrderPlaced, func(_ context.Context, _ pgx.Tx, m Meta, _ contracts.OrderPlaced) error {
		applied[m.EventID.String()]++
		return nil
	})
	envelope := func() contracts.Envelope {
		env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr", contracts.OrderPlaced{
			OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
			Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}},
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	changed := func(env contracts.Envelope) contracts.Envelope {
		env.CorrelationID = "changed"
		return env
	}
	fresh, stored, unhashed := envelope(), envelope(), envelope()
	if _, err := ib.processOne(ctx, mustEvent(t, ib, stored), ib.routeFor(stored.EventName)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, message_key) VALUES ('c', $1)`, unhashed.EventID.String()); err != nil {
		t.Fatal(err)
	}
	applied = map[string]int{}

	type want struct {
		dup      bool
		conflict bool
	}
	members := []struct {
		env  contracts.Envelope
		want want
	}{
		{fresh, want{}},
		{fresh, want{dup: true}},
		{changed(fresh), want{conflict: true}},
		{stored, want{dup: true}},
		{changed(stored), want{conflict: true}},
		{changed(unhashed), want{dup: true}}, // NULL hash: content unknown
	}
	group := make([]*request, len(members))
	for n, m := range members {
		group[n] = &request{event: mustEvent(t, ib, m.env), route: ib.routeFor(m.env.EventName), done: make(chan struct{}), lead: make(chan struct{}, 1)}
	}
	ib.batch.commit(ctx, group)
	for n, r := range group {
		<-r.done
		got := want{dup: r.dup, conflict: errors.Is(r.err, ErrConflict)}
		if got != members[n].want || (r.err != nil && !got.conflict) {
			t.Errorf("member %d: dup %v, err %v; want %+v", n, r.dup, r.err, members[n].want)
		}
	}
	if applied[fresh.EventID.String()] != 1 || len(applied) != 1 {
		t.Errorf("applied %v, want only the fresh event, once", applied)
	}
}

// mustEvent returns the event ib makes of env.
func mustEvent(t *testing.T, ib *Inbox, env contracts.Envelope) *event {
	t.Helper()
	e, _, err := ib.decode(env)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// groupSystem is an Inbox with group commit whose placed events have a
// GroupHandler that writes one effect row per event, with a hook run first.
type groupSystem struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	ib    *Inbox
	mu    sync.Mutex
	calls [][]uuid.UUID // the event ids of each call of the handler
	hook  func(tx pgx.Tx, ids []uuid.UUID) error
}

func newGroupSystem(t *testing.T) *groupSystem {
	t.Helper()
	pool, _ := testkit.NewDatabase(t, migrate.Schema{Migrations(testRoles)})
	s := &groupSystem{t: t, ctx: testkit.Context(t), pool: pool}
	if _, err := pool.Exec(s.ctx, `CREATE TABLE group_effect (event_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s.ib = New(pool, "c", nil, nil, nil, WithGroupCommit(16, 1))
	OnGroup(s.ib, contracts.EventOrderPlaced, func(ctx context.Context, tx pgx.Tx, events []Event[contracts.OrderPlaced]) error {
		ids := make([]uuid.UUID, len(events))
		for n, e := range events {
			ids[n] = e.EventID
		}
		s.mu.Lock()
		s.calls = append(s.calls, ids)
		hook := s.hook
		s.mu.Unlock()
		if hook != nil {
			if err := hook(tx, ids); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO group_effect SELECT unnest($1::uuid[])`, ids)
		return err
	})
	return s
}

func (s *groupSystem) envelope() contracts.Envelope {
	s.t.Helper()
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr", contracts.OrderPlaced{
		OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}},
	}, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return env
}

// commit commits envs as one group and returns each member's request, done.
func (s *groupSystem) commit(envs ...contracts.Envelope) []*request {
	s.t.Helper()
	group := make([]*request, len(envs))
	for n, env := range envs {
		group[n] = &request{event: mustEvent(s.t, s.ib, env), route: s.ib.routeFor(env.EventName),
			done: make(chan struct{}), lead: make(chan struct{}, 1)}
	}
	s.ib.batch.commit(s.ctx, group)
	for _, r := range group {
		<-r.done
	}
	return group
}

// effects returns how often each event's effect and key were committed.
func (s *groupSystem) effects(env contracts.Envelope) (effects, keys int) {
	s.t.Helper()
	err := s.pool.QueryRow(s.ctx, `SELECT (SELECT count(*) FROM group_effect WHERE event_id = $1),
(SELECT count(*) FROM processed_event WHERE consumer = 'c' AND message_key = $1::text)`, env.EventID).Scan(&effects, &keys)
	if err != nil {
		s.t.Fatal(err)
	}
	return effects, keys
}

// A GroupHandler that refuses one event of its group (EventFailed): that event
// alone fails with the error, without key or effect; the others are committed
// once each, by a second call without it.
func TestGroupHandlerFailsOnePoisonEventAlone(t *testing.T) {
	t.Parallel()
	s := newGroupSystem(t)
	envs := []contracts.Envelope{s.envelope(), s.envelope(), s.envelope(), s.envelope()}
	poison := envs[2].EventID
	errPoison := fmt.Errorf("payload: %w", ErrPermanent)
	s.hook = func(_ pgx.Tx, group []uuid.UUID) error {
		for n, id := range group {
			if id == poison {
				return EventFailed(n, errPoison)
			}
		}
		return nil
	}
	group := s.commit(envs...)
	for n, r := range group {
		effects, keys := s.effects(envs[n])
		if n == 2 {
			if !errors.Is(r.err, errPoison) || !Permanent(r.err) || effects != 0 || keys != 0 {
				t.Errorf("poison event: err %v, effects %d, keys %d; want its permanent error, nothing written", r.err, effects, keys)
			}
			continue
		}
		if r.err != nil || r.dup || effects != 1 || keys != 1 {
			t.Errorf("event %d: err %v, dup %v, effects %d, keys %d; want applied once", n, r.err, r.dup, effects, keys)
		}
	}
	if len(s.calls) != 2 || len(s.calls[0]) != 4 || len(s.calls[1]) != 3 || slices.Contains(s.calls[1], poison) {
		t.Errorf("handler calls %v, want the group of 4, then the 3 others in one call", s.calls)
	}
}

// A GroupHandler error that names no event (a statement over the whole group
// failed) has every member processed again alone: only the event that causes it
// fails, the others are applied once each.
func TestGroupHandlerErrorIsAttributedByProcessingAlone(t *testing.T) {
	t.Parallel()
	s := newGroupSystem(t)
	envs := []contracts.Envelope{s.envelope(), s.envelope(), s.envelope()}
	bad := envs[1].EventID
	errBad := errors.New("check constraint violated")
	s.hook = func(_ pgx.Tx, group []uuid.UUID) error {
		for _, id := range group {
			if id == bad {
				return errBad
			}
		}
		return nil
	}
	group := s.commit(envs...)
	for n, r := range group {
		effects, keys := s.effects(envs[n])
		if n == 1 {
			if !errors.Is(r.err, errBad) || Permanent(r.err) || effects != 0 || keys != 0 {
				t.Errorf("bad event: err %v, effects %d, keys %d; want its (retried) error, nothing written", r.err, effects, keys)
			}
			continue
		}
		if r.err != nil || effects != 1 || keys != 1 {
			t.Errorf("event %d: err %v, effects %d, keys %d; want applied once", n, r.err, effects, keys)
		}
	}
	if len(s.calls) != 4 {
		t.Errorf("handler calls %v, want the group, then one call per event", s.calls)
	}
}

// A copy of an event inside the group, and a copy of an event committed before,
// are duplicates: the GroupHandler sees each new event once.
func TestGroupHandlerSeesEachNewEventOnce(t *testing.T) {
	t.Parallel()
	s := newGroupSystem(t)
	old, a, b := s.envelope(), s.envelope(), s.envelope()
	s.commit(old)
	s.calls = nil
	group := s.commit(a, old, b, a, old)
	for n, want := range []bool{false, true, false, true, true} {
		if group[n].err != nil || group[n].dup != want {
			t.Errorf("member %d: dup %v, err %v; want dup %v", n, group[n].dup, group[n].err, want)
		}
	}
	if len(s.calls) != 1 || !slices.Equal(s.calls[0], []uuid.UUID{a.EventID, b.EventID}) {
		t.Errorf("handler calls %v, want one call with %s and %s", s.calls, a.EventID, b.EventID)
	}
	for _, env := range []contracts.Envelope{old, a, b} {
		if effects, keys := s.effects(env); effects != 1 || keys != 1 {
			t.Errorf("event %s: effects %d, keys %d; want 1, 1", env.EventID, effects, keys)
		}
	}
}

// The database connection is lost in the middle of a group (its backend is
// terminated after the keys and some effects were written): the group's
// transaction is gone with everything in it, and every member is processed again
// alone, each applied once.
func TestGroupLosingItsConnectionIsProcessedAgainAlone(t *testing.T) {
	t.Parallel()
	s := newGroupSystem(t)
	var killed atomic.Bool
	s.hook = func(tx pgx.Tx, group []uuid.UUID) error {
		if len(group) < 2 || !killed.CompareAndSwap(false, true) {
			return nil
		}
		if _, err := tx.Exec(s.ctx, `INSERT INTO group_effect VALUES ($1)`, group[0]); err != nil {
			return err
		}
		_, err := tx.Exec(s.ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
		return err
	}
	envs := []contracts.Envelope{s.envelope(), s.envelope(), s.envelope()}
	group := s.commit(envs...)
	if !killed.Load() {
		t.Fatal("the group's connection was not terminated")
	}
	for n, r := range group {
		if effects, keys := s.effects(envs[n]); r.err != nil || r.dup || effects != 1 || keys != 1 {
			t.Errorf("event %d: err %v, dup %v, effects %d, keys %d; want applied once", n, r.err, r.dup, effects, keys)
		}
	}
	if len(s.calls) != 4 {
		t.Errorf("handler calls %v, want the lost group, then one call per event", s.calls)
	}
}
