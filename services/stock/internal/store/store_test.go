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
	"example.com/shop/services/stock/internal/stock"
	"example.com/shop/services/stock/internal/store"
	"example.com/shop/services/stock/migrations"
	"example.com/shop/testkit"
)

func applyStatus(t *testing.T, pool *pgxpool.Pool, c stock.StatusChange) bool {
	t.Helper()
	var applied bool
	err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
		var err error
		applied, err = store.ApplyStatus(testkit.Context(t), tx, c)
		return err
	})
	if err != nil {
		t.Fatalf("apply %+v: %v", c, err)
	}
	return applied
}

func wantStatus(t *testing.T, pool *pgxpool.Pool, orderID uuid.UUID, status stock.Status, version int) {
	t.Helper()
	var got string
	var v int
	err := pool.QueryRow(testkit.Context(t), `SELECT status, version FROM order_status WHERE order_id = $1`, orderID).Scan(&got, &v)
	if err != nil {
		t.Fatalf("order status: %v", err)
	}
	if stock.Status(got) != status || v != version {
		t.Errorf("order status = %s v%d, want %s v%d", got, v, status, version)
	}
}

// TestApplyStatus: a change applies only when its version is newer than the stored one
// (docs/architecture.md, rule 4); the first of two equal versions stays.
func TestApplyStatus(t *testing.T) {
	t.Parallel()
	type step struct {
		status      stock.Status
		version     int
		wantApplied bool
	}
	tests := []struct {
		name        string
		steps       []step
		wantStatus  stock.Status
		wantVersion int
	}{
		{"first version with no row yet is inserted", []step{{stock.StatusPlaced, 2, true}}, stock.StatusPlaced, 2},
		{"cancelled with no row yet is inserted", []step{{stock.StatusCancelled, 3, true}}, stock.StatusCancelled, 3},
		{"older placed after cancelled changes nothing", []step{{stock.StatusCancelled, 3, true}, {stock.StatusPlaced, 2, false}}, stock.StatusCancelled, 3},
		{"same version twice: the first wins", []step{{stock.StatusPlaced, 4, true}, {stock.StatusCancelled, 4, false}}, stock.StatusPlaced, 4},
		{"same version twice the other way round: the first wins", []step{{stock.StatusCancelled, 4, true}, {stock.StatusPlaced, 4, false}}, stock.StatusCancelled, 4},
		{"a gap is applied", []step{{stock.StatusPlaced, 3, true}, {stock.StatusCancelled, 5, true}}, stock.StatusCancelled, 5},
		{"the same change twice applies once", []step{{stock.StatusPlaced, 2, true}, {stock.StatusPlaced, 2, false}}, stock.StatusPlaced, 2},
		{"a newer placed after cancelled wins", []step{{stock.StatusCancelled, 2, true}, {stock.StatusPlaced, 3, true}}, stock.StatusPlaced, 3},
	}
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			orderID := uuid.New()
			for i, st := range tt.steps {
				got := applyStatus(t, pool, stock.StatusChange{OrderID: orderID, Status: st.status, Version: st.version})
				if got != st.wantApplied {
					t.Errorf("step %d (%s v%d): applied = %v, want %v", i, st.status, st.version, got, st.wantApplied)
				}
			}
			wantStatus(t, pool, orderID, tt.wantStatus, tt.wantVersion)
		})
	}
}

func TestApplyStatusRejectsInvalidChanges(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	for _, c := range []stock.StatusChange{
		{OrderID: uuid.Nil, Status: stock.StatusPlaced, Version: 1},
		{OrderID: uuid.New(), Status: stock.StatusPlaced, Version: 0},
		{OrderID: uuid.New(), Status: "shipped", Version: 1},
	} {
		err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
			_, err := store.ApplyStatus(testkit.Context(t), tx, c)
			return err
		})
		if !errors.Is(err, stock.ErrInvalidChange) {
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

// TestApplyStatusConcurrent applies versions 1..n of one order in random order from
// concurrent transactions: the highest version must win.
func TestApplyStatusConcurrent(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	const n = 20
	for round := range 5 {
		orderID := uuid.New()
		final := stock.StatusPlaced
		if round%2 == 1 {
			final = stock.StatusCancelled
		}
		var wg sync.WaitGroup
		for _, v := range rand.Perm(n) {
			status := stock.StatusPlaced
			if v%2 == 1 {
				status = stock.StatusCancelled
			}
			if v+1 == n {
				status = final
			}
			wg.Go(func() {
				err := pg.WithTx(context.Background(), pool, func(tx pgx.Tx) error {
					_, err := store.ApplyStatus(context.Background(), tx, stock.StatusChange{OrderID: orderID, Status: status, Version: v + 1})
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

// TestReserveAndRelease: Reserve writes one held row per line in line order,
// Reservations reads them back, Release marks them released (once: a second release
// changes nothing), and an order with none reads as empty.
func TestReserveAndRelease(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	ctx := testkit.Context(t)
	s := store.New(pool)
	orderID := uuid.New()
	lines := []stock.Line{{ProductID: uuid.New(), Quantity: "1.000"}, {ProductID: uuid.New(), Quantity: "2.500"}}
	var rs []stock.Reservation
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := store.ApplyStatus(ctx, tx, stock.StatusChange{OrderID: orderID, Status: stock.StatusPlaced, Version: 2}); err != nil {
			return err
		}
		var short []stock.Short
		var err error
		rs, short, err = store.Reserve(ctx, tx, orderID, lines)
		if short != nil {
			t.Errorf("untracked products are short: %+v", short)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Reservations(ctx, orderID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("reservations = %+v, want 2", got)
	}
	for n, r := range got {
		if r != rs[n] || r.LineNo != n+1 || r.ID.Version() != 7 {
			t.Errorf("reservation %d = %+v, want %+v (line %d, UUID v7)", n, r, rs[n], n+1)
		}
	}
	for range 2 {
		if err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error { return store.Release(ctx, tx, orderID) }); err != nil {
			t.Fatal(err)
		}
		got, err = s.Reservations(ctx, orderID)
		if err != nil || len(got) != 2 {
			t.Fatalf("reservations after release = %+v, %v; want the 2 rows", got, err)
		}
		for n, r := range got {
			want := rs[n]
			want.Status = stock.Released
			if r != want {
				t.Errorf("reservation %d = %+v, want %+v", n, r, want)
			}
		}
	}
	var releasedAt int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT released_at) FROM reservation WHERE order_id = $1`, orderID).Scan(&releasedAt); err != nil || releasedAt != 1 {
		t.Errorf("distinct released_at = %d, %v; want 1 (the second release changes nothing)", releasedAt, err)
	}
	if got, err := s.Reservations(ctx, uuid.New()); err != nil || got == nil || len(got) != 0 {
		t.Errorf("reservations of an unknown order = %v, %v; want an empty slice", got, err)
	}
}

// ApplyPlaced and ApplyCancelled apply many changes in one call as ApplyStatus,
// Reserve and Release would one by one: each change wins only over an older
// version, an order that appears twice in one call takes its changes in order (the
// second copy of a version loses), the reservations of a placed change are inserted
// only when it wins, and a winning cancel releases what is held.
func TestApplyPlacedAndCancelledForManyOrders(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	ctx := testkit.Context(t)
	s := store.New(pool)
	fresh, stale, twice, other := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	applyStatus(t, pool, stock.StatusChange{OrderID: stale, Status: stock.StatusCancelled, Version: 5})
	placed := func(order uuid.UUID, version int) store.Placed {
		return store.Placed{Change: stock.StatusChange{OrderID: order, Status: stock.StatusPlaced, Version: version},
			Lines: []stock.Line{{ProductID: uuid.New(), Quantity: "1.500"}, {ProductID: uuid.New(), Quantity: "2.000"}}}
	}
	var ds []store.Decision
	err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		ds, err = store.ApplyPlaced(ctx, tx, []store.Placed{
			placed(fresh, 2), placed(stale, 2), placed(twice, 2), placed(twice, 2), placed(other, 2),
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	won := make([]bool, len(ds))
	for n, d := range ds {
		won[n] = d.Won
		if d.Won != d.Confirmed() {
			t.Errorf("decision %d = %+v: untracked products are always reservable", n, d)
		}
	}
	if !slices.Equal(won, []bool{true, false, true, false, true}) {
		t.Errorf("placed won %v, want [true false true false true]", won)
	}
	held := func(order uuid.UUID) (n int, released int) {
		rs, err := s.Reservations(ctx, order)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Status == stock.Held {
				n++
			} else {
				released++
			}
		}
		return n, released
	}
	for _, c := range []struct {
		order          uuid.UUID
		held, released int
	}{{fresh, 2, 0}, {stale, 0, 0}, {twice, 2, 0}, {other, 2, 0}} {
		if h, r := held(c.order); h != c.held || r != c.released {
			t.Errorf("order %s: %d held, %d released; want %d, %d", c.order, h, r, c.held, c.released)
		}
	}
	wantStatus(t, pool, stale, stock.StatusCancelled, 5)
	wantStatus(t, pool, twice, stock.StatusPlaced, 2)

	cancel := func(order uuid.UUID, version int) stock.StatusChange {
		return stock.StatusChange{OrderID: order, Status: stock.StatusCancelled, Version: version}
	}
	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		var err error
		won, err = store.ApplyCancelled(ctx, tx, []stock.StatusChange{cancel(fresh, 3), cancel(stale, 4), cancel(twice, 3), cancel(twice, 4)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(won, []bool{true, false, true, true}) {
		t.Errorf("cancelled won %v, want [true false true true]", won)
	}
	for _, c := range []struct {
		order          uuid.UUID
		held, released int
	}{{fresh, 0, 2}, {twice, 0, 2}, {other, 2, 0}} {
		if h, r := held(c.order); h != c.held || r != c.released {
			t.Errorf("order %s after the cancels: %d held, %d released; want %d, %d", c.order, h, r, c.held, c.released)
		}
	}
	wantStatus(t, pool, twice, stock.StatusCancelled, 4)

	err = pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.ApplyPlaced(ctx, tx, []store.Placed{placed(uuid.New(), 2), placed(uuid.New(), 0)})
		return err
	})
	if !errors.Is(err, stock.ErrInvalidChange) {
		t.Errorf("a call with an invalid change: err = %v, want ErrInvalidChange", err)
	}
}
