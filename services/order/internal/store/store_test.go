package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/order/internal/order"
	"example.com/shop/services/order/internal/store"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

func validator(t testing.TB) *contracts.Validator {
	t.Helper()
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newStore(t testing.TB, opts ...outbox.WriterOption) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	return store.New(pool, outbox.NewWriter(validator(t), contracts.ProducerOrder, opts...)), pool
}

func draft(t testing.TB, quantities ...string) *order.Order {
	t.Helper()
	if len(quantities) == 0 {
		quantities = []string{"2", "0.125"}
	}
	lines := make([]order.Line, len(quantities))
	for i, s := range quantities {
		q, err := order.ParseQuantity(s)
		if err != nil {
			t.Fatal(err)
		}
		lines[i] = order.Line{ProductID: uuid.New(), Quantity: q}
	}
	o, err := order.New(uuid.New(), uuid.New(), lines, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func place(o *order.Order) error  { return o.Place(time.Now()) }
func cancel(o *order.Order) error { return o.Cancel(time.Now()) }

type outboxRow struct {
	ID         uuid.UUID
	EventName  string
	RoutingKey string
	Envelope   contracts.Envelope
}

func outboxRows(t *testing.T, pool *pgxpool.Pool, v *contracts.Validator) []outboxRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id, event_name, routing_key, envelope::text FROM outbox ORDER BY occurred_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var (
			r    outboxRow
			body string
		)
		if err := rows.Scan(&r.ID, &r.EventName, &r.RoutingKey, &body); err != nil {
			t.Fatal(err)
		}
		r.Envelope, err = v.Decode([]byte(body))
		if err != nil {
			t.Fatalf("outbox row %s breaks the contract: %v", r.ID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCreateAndGetRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	o := draft(t, "2", "0.5", "999999999.999")
	if err := s.Create(ctx, o); err != nil {
		t.Fatalf("Create: %v", err)
	}
	got, err := s.Get(ctx, o.ID())
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.ID() != o.ID() || got.CustomerID() != o.CustomerID() || got.Status() != order.StatusDraft || got.Version() != 1 ||
		!got.CreatedAt().Equal(o.CreatedAt()) || !got.UpdatedAt().Equal(o.UpdatedAt()) {
		t.Errorf("got %s %s %s v%d %s %s", got.ID(), got.CustomerID(), got.Status(), got.Version(), got.CreatedAt(), got.UpdatedAt())
	}
	want := o.Lines()
	lines := got.Lines()
	if len(lines) != len(want) {
		t.Fatalf("lines = %d, want %d", len(lines), len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, lines[i], want[i])
		}
	}
	if rows := outboxRows(t, pool, validator(t)); len(rows) != 0 {
		t.Errorf("create wrote %d outbox rows, want 0", len(rows))
	}
	if _, err := s.Get(ctx, uuid.New()); !errors.Is(err, order.ErrNotFound) {
		t.Errorf("Get unknown: %v, want ErrNotFound", err)
	}
}

func TestPlaceWritesOutboxRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	v := validator(t)
	o := draft(t)
	if err := s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, o.ID(), place); err != nil {
		t.Fatalf("place: %v", err)
	}
	got, err := s.Get(ctx, o.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status() != order.StatusPlaced || got.Version() != 2 {
		t.Fatalf("after place: %s v%d", got.Status(), got.Version())
	}
	rows := outboxRows(t, pool, v)
	if len(rows) != 1 {
		t.Fatalf("outbox rows = %d, want 1", len(rows))
	}
	r := rows[0]
	if r.EventName != contracts.EventOrderPlaced || r.RoutingKey != contracts.EventOrderPlaced || r.ID != r.Envelope.EventID ||
		r.Envelope.Producer != contracts.ProducerOrder || r.Envelope.CorrelationID != o.ID().String() {
		t.Errorf("outbox row = %+v", r)
	}
	var p contracts.OrderPlaced
	if err := json.Unmarshal(r.Envelope.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.OrderID != o.ID() || p.CustomerID != o.CustomerID() || p.Version != 2 || len(p.Lines) != 2 ||
		p.Lines[0].Quantity != "2.000" || p.Lines[1].Quantity != "0.125" {
		t.Errorf("payload = %+v", p)
	}
	// The order id is the row's aggregate key: its events share a relay partition.
	var key string
	var hash int32
	if err := pool.QueryRow(ctx, `SELECT aggregate_key, key_hash FROM outbox`).Scan(&key, &hash); err != nil {
		t.Fatal(err)
	}
	if key != o.ID().String() || hash != outbox.KeyHash(key) {
		t.Errorf("aggregate_key %q, key_hash %d; want %s, %d", key, hash, o.ID(), outbox.KeyHash(o.ID().String()))
	}
}

// A transition run outside HTTP (here straight on the store, as a CLI or a test would)
// emits its event too, and a refused transition or a failing closure writes nothing.
func TestUpdateRollsBackOnClosureError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	o := draft(t)
	if err := s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := s.Update(ctx, o.ID(), func(o *order.Order) error {
		if err := place(o); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	got, err := s.Get(ctx, o.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status() != order.StatusDraft || got.Version() != 1 {
		t.Errorf("after failed closure: %s v%d, want draft v1", got.Status(), got.Version())
	}
	if rows := outboxRows(t, pool, validator(t)); len(rows) != 0 {
		t.Errorf("outbox rows = %d, want 0", len(rows))
	}
	if err := s.Update(ctx, uuid.New(), place); !errors.Is(err, order.ErrNotFound) {
		t.Errorf("Update unknown: %v, want ErrNotFound", err)
	}
}

func TestSchemaFailureRollsBackPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An empty producer breaks the envelope schema.
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	s := store.New(pool, outbox.NewWriter(validator(t), ""))
	o := draft(t)
	if err := s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	err := s.Update(ctx, o.ID(), place)
	var verr *contracts.ValidationError
	if !errors.As(err, &verr) || verr.Field != "producer" {
		t.Fatalf("err = %v, want a validation error naming producer", err)
	}
	got, err := s.Get(ctx, o.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status() != order.StatusDraft || got.Version() != 1 {
		t.Errorf("after schema failure: %s v%d, want draft v1", got.Status(), got.Version())
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("outbox rows = %d, want 0", n)
	}
}

// TestFailedSaveRollsBackOutboxRow makes the order's UPDATE fail in PostgreSQL
// (a trigger refuses it): Update must return the UPDATE's error, naming the save, with
// neither the new state nor the outbox row committed.
func TestFailedSaveRollsBackOutboxRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	o := draft(t)
	if err := s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE FUNCTION refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'update refused' USING ERRCODE = 'P0001'; END $$;
		CREATE TRIGGER refuse_update BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION refuse_update()`); err != nil {
		t.Fatal(err)
	}
	err := s.Update(ctx, o.ID(), place)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "P0001" || !strings.Contains(err.Error(), "save: ") {
		t.Fatalf("err = %v, want the refused UPDATE named as the save", err)
	}
	got, err := s.Get(ctx, o.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status() != order.StatusDraft || got.Version() != 1 {
		t.Errorf("after failed save: %s v%d, want draft v1", got.Status(), got.Version())
	}
	if rows := outboxRows(t, pool, validator(t)); len(rows) != 0 {
		t.Errorf("outbox rows = %d, want 0", len(rows))
	}
}

// TestCreateDuplicateFails creates one order twice: the second Create fails
// with the unique violation of the order's INSERT and leaves the first order and its lines as they were.
func TestCreateDuplicateFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	o := draft(t, "1", "2", "3")
	if err := s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	err := s.Create(ctx, o)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(err.Error(), "insert order: ") {
		t.Fatalf("err = %v, want the unique violation of the order's insert", err)
	}
	var lines int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM order_line WHERE order_id = $1`, o.ID()).Scan(&lines); err != nil {
		t.Fatal(err)
	}
	if lines != 3 {
		t.Errorf("order lines = %d, want 3", lines)
	}
	got, err := s.Get(ctx, o.ID())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Lines(), o.Lines()) {
		t.Errorf("lines = %v, want %v in order", got.Lines(), o.Lines())
	}
}

func TestCancelAfterPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	v := validator(t)
	o := draft(t)
	if err := s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, o.ID(), place); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, o.ID(), cancel); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if err := s.Update(ctx, o.ID(), cancel); !errors.Is(err, order.ErrAlreadyCancelled) {
		t.Fatalf("second cancel: %v, want ErrAlreadyCancelled", err)
	}
	if err := s.Update(ctx, o.ID(), place); !errors.Is(err, order.ErrNotDraft) {
		t.Fatalf("place after cancel: %v, want ErrNotDraft", err)
	}
	got, err := s.Get(ctx, o.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status() != order.StatusCancelled || got.Version() != 3 {
		t.Fatalf("after cancel: %s v%d, want cancelled v3", got.Status(), got.Version())
	}
	rows := outboxRows(t, pool, v)
	if len(rows) != 2 || rows[0].EventName != contracts.EventOrderPlaced || rows[1].EventName != contracts.EventOrderCancelled {
		t.Fatalf("outbox = %+v, want placed then cancelled", rows)
	}
	var p contracts.OrderCancelled
	if err := json.Unmarshal(rows[1].Envelope.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.Version != 3 || p.OrderID != o.ID() {
		t.Errorf("cancelled payload = %+v, want version 3", p)
	}
}

func TestConcurrentPlaceAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	o := draft(t)
	if err := s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	const clients = 8
	errs := make(chan error, clients)
	var start sync.WaitGroup
	start.Add(1)
	for range clients {
		go func() {
			start.Wait()
			errs <- s.Update(ctx, o.ID(), place)
		}()
	}
	start.Done()
	ok, refused := 0, 0
	for range clients {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, order.ErrNotDraft):
			refused++
		default:
			t.Fatalf("place: %v", err)
		}
	}
	if ok != 1 || refused != clients-1 {
		t.Fatalf("ok = %d, refused = %d; want 1 and %d", ok, refused, clients-1)
	}
	if rows := outboxRows(t, pool, validator(t)); len(rows) != 1 {
		t.Fatalf("outbox rows = %d, want 1", len(rows))
	}
}

// Store.Idempotent commits the key, the order and the outbox row together: a
// failure rolls all of them back, and concurrent requests with one key create one
// order and all get its answer.
func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := newStore(t)
	c := inbox.NewConsumer(inbox.Config{Name: "order-api", Mode: inbox.ReturnStored})
	m := inbox.Message{Key: "key-1", Content: []byte("create")}
	boom := errors.New("boom")
	if _, err := s.Idempotent(ctx, c, m, func(ctx context.Context, tx store.Tx) (any, error) {
		if err := tx.Create(ctx, draft(t)); err != nil {
			return nil, err
		}
		return nil, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing create: %v, want boom", err)
	}
	count := func(table string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if o, k, e := count("orders"), count("processed_event"), count("outbox"); o+k+e != 0 {
		t.Fatalf("after the failure: orders %d, keys %d, outbox %d; want none", o, k, e)
	}

	const clients = 8
	results := make([]string, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for n := range clients {
		wg.Go(func() {
			o := draft(t)
			out, err := s.Idempotent(ctx, c, m, func(ctx context.Context, tx store.Tx) (any, error) {
				return o.ID().String(), tx.Create(ctx, o)
			})
			results[n], errs[n] = string(out.Result), err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(results))); len(distinct) != 1 {
		t.Fatalf("answers %v, want one", distinct)
	}
	if o, k := count("orders"), count("processed_event"); o != 1 || k != 1 {
		t.Fatalf("orders = %d, keys = %d; want 1, 1", o, k)
	}
}

// The outbox trigger of the migration wakes a listening relay (outbox.NotifyChannel).
func TestOutboxInsertNotifies(t *testing.T) {
	t.Parallel()
	ctx, cancelCtx := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelCtx()
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	s := store.New(pool, outbox.NewWriter(validator(t), contracts.ProducerOrder))
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+outbox.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	o := draft(t)
	if err := s.Create(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, o.ID(), place); err != nil {
		t.Fatal(err)
	}
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	if n.Channel != outbox.NotifyChannel {
		t.Fatalf("channel = %q", n.Channel)
	}
}
