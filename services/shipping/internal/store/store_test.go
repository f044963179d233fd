package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/pg"
	"example.com/shop/services/shipping/internal/shipping"
	"example.com/shop/services/shipping/internal/store"
	"example.com/shop/services/shipping/migrations"
	"example.com/shop/testkit"
)

func applyStatus(t *testing.T, pool *pgxpool.Pool, c shipping.StatusChange) bool {
	t.Helper()
	var applied bool
	err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
		var err error
		won, err := store.Apply(testkit.Context(t), tx, []shipping.StatusChange{c})
		applied = err == nil && won[0]
		return err
	})
	if err != nil {
		t.Fatalf("apply %+v: %v", c, err)
	}
	return applied
}

func wantStatus(t *testing.T, pool *pgxpool.Pool, orderID uuid.UUID, status shipping.Status, version int) {
	t.Helper()
	var got string
	var v int
	err := pool.QueryRow(testkit.Context(t), `SELECT status, version FROM order_status WHERE order_id = $1`, orderID).Scan(&got, &v)
	if err != nil {
		t.Fatalf("order status: %v", err)
	}
	if shipping.Status(got) != status || v != version {
		t.Errorf("order status = %s v%d, want %s v%d", got, v, status, version)
	}
}

// TestApply: a change applies only when its version is newer than the stored one
// (docs/architecture.md, rule 4); the first of two equal versions stays.
func TestApply(t *testing.T) {
	t.Parallel()
	type step struct {
		status      shipping.Status
		version     int
		wantApplied bool
	}
	tests := []struct {
		name        string
		steps       []step
		wantStatus  shipping.Status
		wantVersion int
	}{
		{"first version with no row yet is inserted", []step{{shipping.StatusPlaced, 2, true}}, shipping.StatusPlaced, 2},
		{"cancelled with no row yet is inserted", []step{{shipping.StatusCancelled, 3, true}}, shipping.StatusCancelled, 3},
		{"older placed after cancelled changes nothing", []step{{shipping.StatusCancelled, 3, true}, {shipping.StatusPlaced, 2, false}}, shipping.StatusCancelled, 3},
		{"same version twice: the first wins", []step{{shipping.StatusPlaced, 4, true}, {shipping.StatusCancelled, 4, false}}, shipping.StatusPlaced, 4},
		{"same version twice the other way round: the first wins", []step{{shipping.StatusCancelled, 4, true}, {shipping.StatusPlaced, 4, false}}, shipping.StatusCancelled, 4},
		{"a gap is applied", []step{{shipping.StatusPlaced, 3, true}, {shipping.StatusCancelled, 5, true}}, shipping.StatusCancelled, 5},
		{"the same change twice applies once", []step{{shipping.StatusPlaced, 2, true}, {shipping.StatusPlaced, 2, false}}, shipping.StatusPlaced, 2},
		{"a newer placed after cancelled wins", []step{{shipping.StatusCancelled, 2, true}, {shipping.StatusPlaced, 3, true}}, shipping.StatusPlaced, 3},
	}
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			orderID := uuid.New()
			for i, st := range tt.steps {
				got := applyStatus(t, pool, shipping.StatusChange{OrderID: orderID, Status: st.status, Version: st.version})
				if got != st.wantApplied {
					t.Errorf("step %d (%s v%d): applied = %v, want %v", i, st.status, st.version, got, st.wantApplied)
				}
			}
			wantStatus(t, pool, orderID, tt.wantStatus, tt.wantVersion)
		})
	}
}

// TestApplyRejectsInvalidChanges: one change that can never apply refuses the whole
// call, and nothing is written.
func TestApplyRejectsInvalidChanges(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	for _, c := range []shipping.StatusChange{
		{OrderID: uuid.Nil, Status: shipping.StatusPlaced, Version: 1},
		{OrderID: uuid.New(), Status: shipping.StatusPlaced, Version: 0},
		{OrderID: uuid.New(), Status: "shipped", Version: 1},
	} {
		err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
			_, err := store.Apply(testkit.Context(t), tx, []shipping.StatusChange{
				{OrderID: uuid.New(), Status: shipping.StatusPlaced, Version: 1}, c})
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

// TestApplyAGroup applies one call's changes of several orders, one order changed
// three times: its changes apply in their order (a repeat of an applied version is
// stale), and every winning order's shipment follows its status.
func TestApplyAGroup(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	ctx := testkit.Context(t)
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	cs := []shipping.StatusChange{
		{OrderID: a, Status: shipping.StatusPlaced, Version: 2},
		{OrderID: b, Status: shipping.StatusCancelled, Version: 3},
		{OrderID: a, Status: shipping.StatusConfirmed, Version: 3},
		{OrderID: a, Status: shipping.StatusConfirmed, Version: 3},
		{OrderID: c, Status: shipping.StatusPlaced, Version: 2},
	}
	var won []bool
	if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		won, err = store.Apply(ctx, tx, cs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true, false, true}; !slices.Equal(won, want) {
		t.Errorf("won = %v, want %v", won, want)
	}
	s := store.New(pool)
	for _, w := range []struct {
		order    uuid.UUID
		status   shipping.Status
		version  int
		shipment shipping.ShipmentStatus
	}{
		{a, shipping.StatusConfirmed, 3, shipping.ShipmentReady},
		{b, shipping.StatusCancelled, 3, shipping.ShipmentCancelled},
		{c, shipping.StatusPlaced, 2, shipping.ShipmentPending},
	} {
		wantStatus(t, pool, w.order, w.status, w.version)
		sh, err := s.Shipment(ctx, w.order)
		if err != nil {
			t.Fatal(err)
		}
		if sh.Status != w.shipment {
			t.Errorf("shipment of %s = %s, want %s", w.order, sh.Status, w.shipment)
		}
	}
}

// TestApplyConcurrent applies versions 1..n of one order in random order from
// concurrent transactions: the highest version must win.
func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
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
					_, err := store.Apply(context.Background(), tx, []shipping.StatusChange{{OrderID: orderID, Status: status, Version: v + 1}})
					return err
				})
				if err != nil {
					t.Errorf("apply v%d: %v", v+1, err)
				}
			})
		}
		wg.Wait()
		wantStatus(t, pool, orderID, final, n)
	}
}

// TestApplyMovesTheShipment: the first change creates the order's shipment, a newer
// one moves it to the status that follows and keeps its id and created_at, and a
// stale one leaves it.
func TestApplyMovesTheShipment(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	ctx := testkit.Context(t)
	s := store.New(pool)
	orderID := uuid.New()
	apply := func(status shipping.Status, version int, want shipping.ShipmentStatus) shipping.Shipment {
		t.Helper()
		applyStatus(t, pool, shipping.StatusChange{OrderID: orderID, Status: status, Version: version})
		sh, err := s.Shipment(ctx, orderID)
		if err != nil {
			t.Fatal(err)
		}
		if sh.Status != want || sh.OrderID != orderID || sh.ID.Version() != 7 {
			t.Errorf("after %s v%d: shipment = %+v, want %s for order %s with a UUID v7 id", status, version, sh, want, orderID)
		}
		return sh
	}
	first := apply(shipping.StatusPlaced, 2, shipping.ShipmentPending)
	second := apply(shipping.StatusConfirmed, 3, shipping.ShipmentReady)
	third := apply(shipping.StatusCancelled, 4, shipping.ShipmentCancelled)
	apply(shipping.StatusConfirmed, 3, shipping.ShipmentCancelled) // stale: stays cancelled
	for _, sh := range []shipping.Shipment{second, third} {
		if sh.ID != first.ID || !sh.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("shipment was replaced: %+v, then %+v", first, sh)
		}
	}
	if third.UpdatedAt.Before(first.UpdatedAt) {
		t.Errorf("updated_at went back: %v, then %v", first.UpdatedAt, third.UpdatedAt)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	s := store.New(pool)
	ctx := testkit.Context(t)
	if _, err := s.OrderStatus(ctx, uuid.New()); !errors.Is(err, shipping.ErrNotFound) {
		t.Errorf("order status of unknown order: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Shipment(ctx, uuid.New()); !errors.Is(err, shipping.ErrNotFound) {
		t.Errorf("shipment of unknown order: err = %v, want ErrNotFound", err)
	}
}
