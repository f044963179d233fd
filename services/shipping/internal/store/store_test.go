package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/pg"
	"example.com/shop/platform/testkit"
	"example.com/shop/services/shipping/internal/shipping"
	"example.com/shop/services/shipping/internal/store"
	"example.com/shop/services/shipping/migrations"
)

func apply(t *testing.T, pool *pgxpool.Pool, c shipping.StatusChange) bool {
	t.Helper()
	var applied bool
	err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
		var err error
		applied, err = store.Apply(testkit.Context(t), tx, c)
		return err
	})
	if err != nil {
		t.Fatalf("apply %+v: %v", c, err)
	}
	return applied
}

func wantState(t *testing.T, s *store.Store, orderID uuid.UUID, status shipping.Status, version int, shipment shipping.ShipmentStatus) shipping.Shipment {
	t.Helper()
	ctx := testkit.Context(t)
	os, err := s.OrderStatus(ctx, orderID)
	if err != nil {
		t.Fatalf("order status: %v", err)
	}
	if os.Status != status || os.Version != version {
		t.Errorf("order status = %s v%d, want %s v%d", os.Status, os.Version, status, version)
	}
	sh, err := s.Shipment(ctx, orderID)
	if err != nil {
		t.Fatalf("shipment: %v", err)
	}
	if sh.Status != shipment {
		t.Errorf("shipment status = %s, want %s", sh.Status, shipment)
	}
	if sh.OrderID != orderID || sh.ID.Version() != 7 {
		t.Errorf("shipment = %+v, want order %s and a UUID v7 id", sh, orderID)
	}
	return sh
}

func TestApply(t *testing.T) {
	t.Parallel()
	type step struct {
		status      shipping.Status
		version     int
		wantApplied bool
	}
	tests := []struct {
		name         string
		steps        []step
		wantStatus   shipping.Status
		wantVersion  int
		wantShipment shipping.ShipmentStatus
	}{
		{
			name:       "first version with no row yet is inserted",
			steps:      []step{{shipping.StatusPlaced, 2, true}},
			wantStatus: shipping.StatusPlaced, wantVersion: 2, wantShipment: shipping.ShipmentReady,
		},
		{
			name:       "cancelled with no row yet creates a cancelled shipment",
			steps:      []step{{shipping.StatusCancelled, 3, true}},
			wantStatus: shipping.StatusCancelled, wantVersion: 3, wantShipment: shipping.ShipmentCancelled,
		},
		{
			name:       "older placed after cancelled changes nothing",
			steps:      []step{{shipping.StatusCancelled, 3, true}, {shipping.StatusPlaced, 2, false}},
			wantStatus: shipping.StatusCancelled, wantVersion: 3, wantShipment: shipping.ShipmentCancelled,
		},
		{
			name:       "same version twice: the first wins",
			steps:      []step{{shipping.StatusPlaced, 4, true}, {shipping.StatusCancelled, 4, false}},
			wantStatus: shipping.StatusPlaced, wantVersion: 4, wantShipment: shipping.ShipmentReady,
		},
		{
			name:       "same version twice the other way round: the first wins",
			steps:      []step{{shipping.StatusCancelled, 4, true}, {shipping.StatusPlaced, 4, false}},
			wantStatus: shipping.StatusCancelled, wantVersion: 4, wantShipment: shipping.ShipmentCancelled,
		},
		{
			name:       "a gap is applied",
			steps:      []step{{shipping.StatusPlaced, 3, true}, {shipping.StatusCancelled, 5, true}},
			wantStatus: shipping.StatusCancelled, wantVersion: 5, wantShipment: shipping.ShipmentCancelled,
		},
		{
			name:       "the same change twice applies once",
			steps:      []step{{shipping.StatusPlaced, 2, true}, {shipping.StatusPlaced, 2, false}},
			wantStatus: shipping.StatusPlaced, wantVersion: 2, wantShipment: shipping.ShipmentReady,
		},
		{
			name:       "a newer placed after cancelled follows the winner",
			steps:      []step{{shipping.StatusCancelled, 2, true}, {shipping.StatusPlaced, 3, true}},
			wantStatus: shipping.StatusPlaced, wantVersion: 3, wantShipment: shipping.ShipmentReady,
		},
	}
	pool, _ := testkit.NewDatabase(t, migrations.FS)
	s := store.New(pool)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			orderID := uuid.New()
			for i, st := range tt.steps {
				got := apply(t, pool, shipping.StatusChange{OrderID: orderID, Status: st.status, Version: st.version})
				if got != st.wantApplied {
					t.Errorf("step %d (%s v%d): applied = %v, want %v", i, st.status, st.version, got, st.wantApplied)
				}
			}
			wantState(t, s, orderID, tt.wantStatus, tt.wantVersion, tt.wantShipment)
		})
	}
}

func TestApplyKeepsTheShipment(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.FS)
	s := store.New(pool)
	orderID := uuid.New()
	apply(t, pool, shipping.StatusChange{OrderID: orderID, Status: shipping.StatusPlaced, Version: 2})
	first := wantState(t, s, orderID, shipping.StatusPlaced, 2, shipping.ShipmentReady)
	apply(t, pool, shipping.StatusChange{OrderID: orderID, Status: shipping.StatusCancelled, Version: 3})
	second := wantState(t, s, orderID, shipping.StatusCancelled, 3, shipping.ShipmentCancelled)
	if second.ID != first.ID || !second.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("shipment was replaced: %+v, then %+v", first, second)
	}
	if second.UpdatedAt.Before(first.UpdatedAt) {
		t.Errorf("updated_at went back: %v, then %v", first.UpdatedAt, second.UpdatedAt)
	}
}

func TestApplyRejectsInvalidChanges(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.FS)
	for _, c := range []shipping.StatusChange{
		{OrderID: uuid.Nil, Status: shipping.StatusPlaced, Version: 1},
		{OrderID: uuid.New(), Status: shipping.StatusPlaced, Version: 0},
		{OrderID: uuid.New(), Status: "shipped", Version: 1},
	} {
		err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
			_, err := store.Apply(testkit.Context(t), tx, c)
			return err
		})
		if !errors.Is(err, shipping.ErrInvalidChange) {
			t.Errorf("apply %+v: err = %v, want ErrInvalidChange", c, err)
		}
	}
	var n int
	if err := pool.QueryRow(testkit.Context(t), `SELECT count(*) FROM order_status`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("order_status has %d rows, want 0", n)
	}
}

// TestApplyConcurrent applies versions 1..n of one order in random order from
// concurrent transactions: the highest version must win, with the shipment in
// step with it.
func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.FS)
	s := store.New(pool)
	const n = 20
	for round := range 5 {
		orderID := uuid.New()
		final := shipping.StatusPlaced
		if round%2 == 1 {
			final = shipping.StatusCancelled
		}
		var wg sync.WaitGroup
		for _, v := range rand.Perm(n) {
			status := shipping.StatusPlaced
			if v%2 == 1 {
				status = shipping.StatusCancelled
			}
			if v+1 == n {
				status = final
			}
			wg.Go(func() {
				err := pg.WithTx(context.Background(), pool, func(tx pgx.Tx) error {
					_, err := store.Apply(context.Background(), tx, shipping.StatusChange{OrderID: orderID, Status: status, Version: v + 1})
					return err
				})
				if err != nil {
					t.Errorf("apply v%d: %v", v+1, err)
				}
			})
		}
		wg.Wait()
		want := shipping.ShipmentReady
		if final == shipping.StatusCancelled {
			want = shipping.ShipmentCancelled
		}
		wantState(t, s, orderID, final, n, want)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.FS)
	s := store.New(pool)
	ctx := testkit.Context(t)
	if _, err := s.OrderStatus(ctx, uuid.New()); !errors.Is(err, shipping.ErrNotFound) {
		t.Errorf("order status of unknown order: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Shipment(ctx, uuid.New()); !errors.Is(err, shipping.ErrNotFound) {
		t.Errorf("shipment of unknown order: err = %v, want ErrNotFound", err)
	}
}
