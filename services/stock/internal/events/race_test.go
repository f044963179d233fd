package events_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/stock/internal/events"
	"example.com/shop/services/stock/internal/store"
	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit"
	"example.com/shop/testkit/inboxtest"
)

// A cancel processed at the same moment as its order's place must not leave stock
// held: the versioned upsert on order_status makes the two transactions take turns,
// and a tracked product gets back every unit the place took (docs/architecture.md,
// rules 4, 6 and 7).
func TestConcurrentPlaceAndCancelHoldNothing(t *testing.T) {
	t.Parallel()
	t.Run("one transaction per event", func(t *testing.T) { testConcurrentPlaceAndCancel(t) })
	t.Run("group commit", func(t *testing.T) { testConcurrentPlaceAndCancel(t, inbox.WithGroupCommit(16, 2)) })
}

func testConcurrentPlaceAndCancel(t *testing.T, opts ...inbox.Option) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	logger, _ := testkit.Logger(t)
	ib := inbox.New(pool, events.Consumer, v, logger, nil, opts...)
	events.Register(ib, outbox.NewWriter(v, contracts.ProducerStock), logger)

	tracked := uuid.New() // on every order, with enough for all of them
	if _, err := store.New(pool).SetOnHand(ctx, tracked, 1000_000); err != nil {
		t.Fatal(err)
	}
	const orders = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*orders)
	for range orders {
		p := contracts.OrderPlaced{
			OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
			Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}, {ProductID: tracked, Quantity: "2.500"}},
		}
		placed, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, p.OrderID.String(), p, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c := contracts.OrderCancelled(p)
		c.Version = 3
		cancelled, err := contracts.NewEnvelope(contracts.EventOrderCancelled, contracts.ProducerOrder, p.OrderID.String(), c, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, env := range []contracts.Envelope{placed, cancelled} {
			wg.Go(func() {
				// A group that holds one order's row and waits for a product row can
				// deadlock with a transaction doing the opposite; the loser's delivery
				// comes back, as here.
				if err := inboxtest.Redeliver(ctx, ib, env, 5); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Process: %v", err)
	}
	var held int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM reservation WHERE status = 'held'`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("reservations held after %d concurrent place+cancel pairs = %d, want 0", orders, held)
	}
	if lv, err := store.New(pool).Level(ctx, tracked); err != nil || lv.Reserved != 0 {
		t.Fatalf("the tracked product keeps %s reserved (%v), want 0.000", lv.Reserved, err)
	}
	var cancelled int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM order_status WHERE status = 'cancelled' AND version = 3`).Scan(&cancelled); err != nil {
		t.Fatal(err)
	}
	if cancelled != orders {
		t.Fatalf("orders cancelled at version 3 = %d, want %d", cancelled, orders)
	}
}
