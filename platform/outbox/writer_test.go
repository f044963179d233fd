package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"example.com/shop/contracts"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

// newWriterDB returns a pool on a fresh database migrated with the outbox's
// migrations, as the relay tests use too.
func newWriterDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := testkit.NewDatabase(t, migrate.Schema{outbox.Migrations(outbox.Roles{Writer: "test_writer", Relay: "test_relay", Maintenance: "test_maintenance"})})
	return pool
}

func newValidator(t *testing.T) *contracts.Validator {
	t.Helper()
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func placedPayload() contracts.OrderPlaced {
	return contracts.OrderPlaced{
		OrderID:    uuid.New(),
		CustomerID: uuid.New(),
		Lines:      []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}},
		Version:    2,
	}
}

func countOutbox(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWriteInsertsValidatedEnvelope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newWriterDB(t)
	v := newValidator(t)
	now := time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.FixedZone("CET", 3600))
	w := outbox.NewWriter(v, contracts.ProducerOrder, outbox.WithClock(func() time.Time { return now }))
	payload := placedPayload()

	var env contracts.Envelope
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		env, err = w.Write(ctx, tx, contracts.EventOrderPlaced, payload.OrderID.String(), payload.OrderID.String(), payload)
		return err
	})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if env.EventID.Version() != 7 {
		t.Errorf("event id %s is UUID v%d, want v7", env.EventID, env.EventID.Version())
	}

	var (
		id          uuid.UUID
		name, key   string
		body        []byte
		occurredAt  time.Time
		publishedAt *time.Time
		attempts    int
		lastError   *string
	)
	err = pool.QueryRow(ctx, `SELECT id, event_name, routing_key, envelope, occurred_at, published_at, attempts, last_error FROM outbox`).
		Scan(&id, &name, &key, &body, &occurredAt, &publishedAt, &attempts, &lastError)
	if err != nil {
		t.Fatal(err)
	}
	if id != env.EventID || name != contracts.EventOrderPlaced || key != contracts.EventOrderPlaced {
		t.Errorf("row = (%s, %s, %s), want (%s, %s, %s)", id, name, key, env.EventID, contracts.EventOrderPlaced, contracts.EventOrderPlaced)
	}
	wantAt := now.Truncate(time.Millisecond).UTC()
	if !occurredAt.Equal(wantAt) {
		t.Errorf("occurred_at = %s, want %s", occurredAt, wantAt)
	}
	if publishedAt != nil || attempts != 0 || lastError != nil {
		t.Errorf("new row published_at=%v attempts=%d last_error=%v, want unpublished", publishedAt, attempts, lastError)
	}

	got, err := v.Decode(body)
	if err != nil {
		t.Fatalf("stored envelope fails the contract: %v", err)
	}
	if got.EventID != env.EventID || got.Producer != contracts.ProducerOrder ||
		got.SchemaVersion != contracts.SchemaVersion || got.CorrelationID != payload.OrderID.String() ||
		!got.OccurredAt.Equal(wantAt) {
		t.Errorf("stored envelope = %+v", got)
	}
	var p contracts.OrderPlaced
	if err := json.Unmarshal(got.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.OrderID != payload.OrderID || p.Version != 2 || len(p.Lines) != 1 || p.Lines[0].Quantity != "2.000" {
		t.Errorf("stored payload = %+v, want %+v", p, payload)
	}
}

func TestWriteInvalidPayloadRollsBackCallerTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newWriterDB(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE business (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter(newValidator(t), contracts.ProducerOrder)
	payload := placedPayload()
	payload.Lines[0].Quantity = "-1"

	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO business VALUES (1)`); err != nil {
			return err
		}
		_, err := w.Write(ctx, tx, contracts.EventOrderPlaced, payload.OrderID.String(), payload.OrderID.String(), payload)
		return err
	})
	var verr *contracts.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("err = %v, want a *contracts.ValidationError", err)
	}
	if verr.Field != "payload.lines[0].quantity" || !strings.Contains(err.Error(), "payload.lines[0].quantity") {
		t.Errorf("err = %v (field %q), want it to name payload.lines[0].quantity", err, verr.Field)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM business`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("business rows = %d, want 0 after rollback", n)
	}
	if n := countOutbox(t, pool); n != 0 {
		t.Errorf("outbox rows = %d, want 0", n)
	}
}

// An envelope field that breaks the schema (here an empty producer) is
// refused like a bad payload: nothing is inserted.
func TestWriteInvalidEnvelopeIsRejected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newWriterDB(t)
	w := outbox.NewWriter(newValidator(t), "")
	payload := placedPayload()
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := w.Write(ctx, tx, contracts.EventOrderPlaced, payload.OrderID.String(), payload.OrderID.String(), payload)
		return err
	})
	var verr *contracts.ValidationError
	if !errors.As(err, &verr) || verr.Field != "producer" {
		t.Fatalf("err = %v, want a validation error on the producer", err)
	}
	if n := countOutbox(t, pool); n != 0 {
		t.Errorf("outbox rows = %d, want 0", n)
	}
}

// The Writer stores the aggregate key and its hash, the same hash as the
// migration's SQL function outbox_key_hash, which rows written by other
// means (a backfill, a test) use.
func TestWriteStoresTheKeyAndItsHash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newWriterDB(t)
	w := outbox.NewWriter(newValidator(t), contracts.ProducerOrder)
	keys := []string{"", "a", uuid.NewString(), uuid.NewString(), uuid.NewString()}
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		for _, k := range keys {
			if _, err := w.Write(ctx, tx, contracts.EventOrderPlaced, k, "c", placedPayload()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT aggregate_key, key_hash, outbox_key_hash(aggregate_key) FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var key string
		var stored, sql int32
		if err := rows.Scan(&key, &stored, &sql); err != nil {
			t.Fatal(err)
		}
		if stored != outbox.KeyHash(key) || sql != stored || stored < 0 {
			t.Errorf("key %q: stored hash %d, KeyHash %d, outbox_key_hash %d", key, stored, outbox.KeyHash(key), sql)
		}
		seen++
	}
	if err := rows.Err(); err != nil || seen != len(keys) {
		t.Fatalf("%d rows (%v), want %d", seen, err, len(keys))
	}
	if h := outbox.KeyHash(""); h != 0 {
		t.Errorf("KeyHash(\"\") = %d, want 0", h)
	}
	// Fixed values: the hash may never change, rows keep it.
	if h := outbox.KeyHash("abc"); h != 268521624 {
		t.Errorf("KeyHash(abc) = %d, want 268521624", h)
	}
}

func TestWriteUnknownEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newWriterDB(t)
	w := outbox.NewWriter(newValidator(t), contracts.ProducerOrder)
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := w.Write(ctx, tx, "order.order.exploded.v1", "k", "c", placedPayload())
		return err
	})
	if !errors.Is(err, contracts.ErrUnknownEvent) {
		t.Fatalf("err = %v, want ErrUnknownEvent", err)
	}
	if n := countOutbox(t, pool); n != 0 {
		t.Errorf("outbox rows = %d, want 0", n)
	}
}

// Insert stores every prepared entry with one statement, bytes as validated
// and in the trace of the context each was prepared in; a statement that
// fails inserts none of them.
func TestInsertStoresEveryEntryOrNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newWriterDB(t)
	w := outbox.NewWriter(newValidator(t), contracts.ProducerOrder)
	traced := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}))
	var entries []outbox.Entry
	for i, c := range []context.Context{ctx, traced, ctx} {
		p := placedPayload()
		e, err := w.Prepare(c, contracts.EventOrderPlaced, p.OrderID.String(), strconv.Itoa(i), p)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error { return w.Insert(ctx, tx, entries...) }); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	for i, e := range entries {
		var key, corr string
		var hash int32
		var traceparent *string
		err := pool.QueryRow(ctx, `SELECT aggregate_key, key_hash, envelope->>'correlation_id', trace_context->>'traceparent'
			FROM outbox WHERE id = $1`, e.Envelope.EventID).Scan(&key, &hash, &corr, &traceparent)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		var p contracts.OrderPlaced
		if err := json.Unmarshal(e.Envelope.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if key != p.OrderID.String() || hash != outbox.KeyHash(key) || corr != strconv.Itoa(i) {
			t.Errorf("entry %d: row (%s, %d, %s), want (%s, %d, %d)", i, key, hash, corr, p.OrderID, outbox.KeyHash(key), i)
		}
		if want := i == 1; (traceparent != nil) != want {
			t.Errorf("entry %d: traceparent %v, want one: %v", i, traceparent, want)
		}
	}
	var tp string
	if err := pool.QueryRow(ctx, `SELECT trace_context->>'traceparent' FROM outbox WHERE id = $1`, entries[1].Envelope.EventID).Scan(&tp); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tp, "00-01000000000000000000000000000000-0200000000000000-") {
		t.Errorf("traceparent %q, not the preparing span's", tp)
	}

	// The same entries again: the first's id is taken, so none goes in.
	fresh, err := w.Prepare(ctx, contracts.EventOrderPlaced, "k", "c", placedPayload())
	if err != nil {
		t.Fatal(err)
	}
	again := []outbox.Entry{fresh, entries[0]}
	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error { return w.Insert(ctx, tx, again...) })
	if err == nil || !strings.Contains(err.Error(), "insert 2 events") {
		t.Fatalf("Insert of a taken id: %v, want an error naming 2 events", err)
	}
	if n := countOutbox(t, pool); n != len(entries) {
		t.Errorf("outbox rows = %d, want %d", n, len(entries))
	}
	if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error { return w.Insert(ctx, tx) }); err != nil {
		t.Errorf("Insert of nothing: %v", err)
	}
}

// TestQueueSendsInsertInACallersBatch: Queue adds Insert's statement to a batch the
// caller sends with its own statements in one round trip; the rows are those Insert
// writes, and no entries queue nothing.
func TestQueueSendsInsertInACallersBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newWriterDB(t)
	w := outbox.NewWriter(newValidator(t), contracts.ProducerOrder)
	var ids []string
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		var entries []outbox.Entry
		for range 2 {
			e, err := w.Prepare(ctx, contracts.EventOrderPlaced, uuid.NewString(), "c", placedPayload())
			if err != nil {
				return err
			}
			entries = append(entries, e)
			ids = append(ids, e.Envelope.EventID.String())
		}
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		if queued, err := w.Queue(b, entries...); err != nil || !queued {
			t.Fatalf("Queue = %v, %v; want true, nil", queued, err)
		}
		if queued, err := w.Queue(b); err != nil || queued {
			t.Errorf("Queue of no entries = %v, %v; want false, nil", queued, err)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id::text = ANY($1)`, ids).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d rows (%v), want the 2 queued", n, err)
	}
}
