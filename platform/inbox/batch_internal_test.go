package inbox

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/testkit"
)

//go:embed testdata/migrations/*.sql
var internalMigrations embed.FS

// One group holding new events, copies within the group, copies of keys stored
// before (with and without a hash) and changed copies of each: every member gets
// the outcome Handle would give it alone.
func TestGroupCommitDecidesDuplicatesAndConflicts(t *testing.T) {
	t.Parallel()
	migrations, err := fs.Sub(internalMigrations, "testdata/migrations")
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := testkit.NewDatabase(t, migrations)
	ctx := testkit.Context(t)
	ib := New(pool, "c", nil, nil, nil, WithGroupCommit(16, 1))
	applied := map[string]int{}
	handlers := []Handler{func(_ context.Context, _ pgx.Tx, env contracts.Envelope) error {
		applied[env.EventID.String()]++
		return nil
	}}
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
	if _, err := ib.processOne(ctx, stored, mustMessage(t, stored), route{handlers: handlers}); err != nil {
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
		group[n] = &request{env: m.env, msg: mustMessage(t, m.env), handlers: route{handlers: handlers}, done: make(chan struct{}), lead: make(chan struct{}, 1)}
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

func mustMessage(t *testing.T, env contracts.Envelope) Message {
	t.Helper()
	m, err := message(env)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
