package events_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/services/shipping/internal/events"
	"example.com/shop/services/shipping/internal/shipping"
	"example.com/shop/services/shipping/internal/store"
	"example.com/shop/services/shipping/migrations"
	"example.com/shop/testkit"
	"example.com/shop/testkit/inboxtest"
)

// TestConcurrentChangesKeepTheShipmentInStep processes versions 1..n of one order in
// random order from concurrent inbox transactions, alone or in groups: the highest
// version must win, and the shipment must follow it, because the shipment is written
// only by the winner of the versioned upsert while it holds the order's row.
func TestConcurrentChangesKeepTheShipmentInStep(t *testing.T) {
	t.Parallel()
	t.Run("one transaction per event", func(t *testing.T) { testConcurrentChanges(t) })
	t.Run("group commit", func(t *testing.T) { testConcurrentChanges(t, inbox.WithGroupCommit(16, 2)) })
}

func testConcurrentChanges(t *testing.T, opts ...inbox.Option) {
	t.Parallel()
	ctx := testkit.Context(t)
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	logger, _ := testkit.Logger(t)
	ib := inbox.New(pool, events.Consumer, v, logger, nil, opts...)
	events.Register(ib, logger)
	s := store.New(pool)
	const n = 20
	for round := range 5 {
		orderID := uuid.New()
		final := contracts.EventOrderPlaced
		if round%2 == 1 {
			final = contracts.EventOrderCancelled
		}
		var wg sync.WaitGroup
		for _, version := range rand.Perm(n) {
			name := contracts.EventOrderPlaced
			if version%2 == 1 {
				name = contracts.EventOrderCancelled
			}
			if version+1 == n {
				name = final
			}
			env := event(t, name, orderID, version+1, uuid.Nil, time.Time{})
			wg.Go(func() {
				// Groups lock an order's row once per round: two groups can deadlock,
				// and the loser's delivery comes back, as here.
				if err := inboxtest.Redeliver(ctx, ib, env, 5); err != nil {
					t.Errorf("process event %s: %v", env.EventID, err)
				}
			})
		}
		wg.Wait()
		status, shipment := shipping.StatusPlaced, shipping.ShipmentPending
		if final == contracts.EventOrderCancelled {
			status, shipment = shipping.StatusCancelled, shipping.ShipmentCancelled
		}
		os, err := s.OrderStatus(ctx, orderID)
		if err != nil || os.Status != status || os.Version != n {
			t.Errorf("round %d: order status = %+v, %v; want %s v%d", round, os, err, status, n)
		}
		sh, err := s.Shipment(ctx, orderID)
		if err != nil || sh.Status != shipment {
			t.Errorf("round %d: shipment = %+v, %v; want %s", round, sh, err, shipment)
		}
	}
}
