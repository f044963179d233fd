package events_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/stock/internal/events"
	"example.com/shop/services/stock/internal/store"
	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit"
)

// answers returns the envelopes of stock's outbox for order orderID, oldest first.
func answers(t *testing.T, pool *pgxpool.Pool, orderID uuid.UUID) []contracts.Envelope {
	t.Helper()
	rows, err := pool.Query(testkit.Context(t), `SELECT envelope FROM outbox WHERE aggregate_key = $1 ORDER BY occurred_at, id`, orderID.String())
	if err != nil {
		t.Fatal(err)
	}
	var out []contracts.Envelope
	var raw []byte
	for rows.Next() {
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var env contracts.Envelope
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Stock answers each placed order once, through its outbox, in the transaction of the
// reservations and the event's key (docs/architecture.md, rules 1, 3 and 6): confirmed
// with the held lines, or rejected with the short lines and nothing held; a duplicate
// or a stale placed event answers nothing; and when the answer cannot be written,
// neither the reservations nor the key stay.
func TestPlacedIsAnsweredInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	ib := inbox.New(pool, events.Consumer, v, nil, nil)
	events.Register(ib, outbox.NewWriter(v, contracts.ProducerStock), nil)
	product, untracked := uuid.New(), uuid.New()
	if _, err := store.New(pool).SetOnHand(ctx, product, 5000); err != nil {
		t.Fatal(err)
	}
	placed := func(qty string) (contracts.Envelope, contracts.OrderPlaced) {
		p := contracts.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2, Lines: []contracts.OrderLine{
			{ProductID: untracked, Quantity: "1"}, {ProductID: product, Quantity: qty}}}
		env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr-"+p.OrderID.String(), p, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return env, p
	}
	process := func(env contracts.Envelope) (duplicate bool) {
		t.Helper()
		dup, err := ib.Process(ctx, env)
		if err != nil {
			t.Fatalf("process %s: %v", env.EventName, err)
		}
		return dup
	}

	envA, a := placed("3")
	process(envA)
	got := answers(t, pool, a.OrderID)
	if len(got) != 1 || got[0].EventName != contracts.EventStockReservationConfirmed || got[0].Producer != contracts.ProducerStock ||
		got[0].CorrelationID != envA.CorrelationID {
		t.Fatalf("answers to a = %+v, want one confirmation with the placed event's correlation id", got)
	}
	var conf contracts.StockReservationConfirmed
	if err := json.Unmarshal(got[0].Payload, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.OrderID != a.OrderID || conf.OrderVersion != 2 || len(conf.Lines) != 2 ||
		conf.Lines[0] != (contracts.OrderLine{ProductID: untracked, Quantity: "1.000"}) ||
		conf.Lines[1] != (contracts.OrderLine{ProductID: product, Quantity: "3.000"}) {
		t.Errorf("confirmation = %+v", conf)
	}

	envB, b := placed("2.001")
	process(envB)
	got = answers(t, pool, b.OrderID)
	if len(got) != 1 || got[0].EventName != contracts.EventStockReservationRejected {
		t.Fatalf("answers to b = %+v, want one rejection", got)
	}
	var rej contracts.StockReservationRejected
	if err := json.Unmarshal(got[0].Payload, &rej); err != nil {
		t.Fatal(err)
	}
	if rej.OrderID != b.OrderID || rej.OrderVersion != 2 || rej.Reason != contracts.RejectionInsufficientStock ||
		len(rej.Lines) != 1 || rej.Lines[0] != (contracts.ShortLine{ProductID: product, Requested: "2.001", Available: "2.000"}) {
		t.Errorf("rejection = %+v", rej)
	}
	held := func(orderID uuid.UUID) (n int) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM reservation WHERE order_id = $1 AND status = 'held'`, orderID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := held(b.OrderID); n != 0 {
		t.Errorf("a rejected order holds %d lines, want 0", n)
	}

	if !process(envA) || len(answers(t, pool, a.OrderID)) != 1 {
		t.Errorf("a duplicate of a placed event answered again")
	}

	// A cancel that wins before its place: the late place holds and answers nothing.
	envC, c := placed("1")
	cc := contracts.OrderCancelled(c)
	cc.Version = 3
	cancelled, err := contracts.NewEnvelope(contracts.EventOrderCancelled, contracts.ProducerOrder, "x", cc, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	process(cancelled)
	process(envC)
	if n := len(answers(t, pool, c.OrderID)); n != 0 || held(c.OrderID) != 0 {
		t.Errorf("a placed event after its cancel: %d answers, %d held; want none", n, held(c.OrderID))
	}

	// The answer fails to insert: the reservations and the key roll back with it.
	if _, err := pool.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'outbox refused'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	envD, d := placed("1")
	if _, err := ib.Process(ctx, envD); err == nil {
		t.Fatal("processing with the outbox refusing: want an error")
	}
	var keys int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE message_key = $1`, envD.EventID.String()).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != 0 || held(d.OrderID) != 0 {
		t.Errorf("after a failed answer: %d keys, %d held; want nothing", keys, held(d.OrderID))
	}
	lv, err := store.New(pool).Level(ctx, product)
	if err != nil || lv.Reserved != 3000 {
		t.Errorf("product reserved %s (%v), want only a's 3.000", lv.Reserved, err)
	}
}
