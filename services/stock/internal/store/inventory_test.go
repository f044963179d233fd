package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
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

func setOnHand(t *testing.T, s *store.Store, product uuid.UUID, onHand string) stock.Level {
	t.Helper()
	q, err := stock.ParseQuantity(onHand)
	if err != nil {
		t.Fatal(err)
	}
	lv, err := s.SetOnHand(testkit.Context(t), product, q)
	if err != nil {
		t.Fatalf("set on hand of %s to %s: %v", product, onHand, err)
	}
	return lv
}

func wantLevel(t *testing.T, s *store.Store, product uuid.UUID, onHand, reserved string) {
	t.Helper()
	lv, err := s.Level(testkit.Context(t), product)
	if err != nil {
		t.Fatalf("level of %s: %v", product, err)
	}
	if lv.OnHand.String() != onHand || lv.Reserved.String() != reserved {
		t.Errorf("level of %s = on hand %s, reserved %s; want %s, %s", product, lv.OnHand, lv.Reserved, onHand, reserved)
	}
}

// place applies one placed event in its own transaction and returns the decision.
func place(t *testing.T, pool *pgxpool.Pool, orderID uuid.UUID, version int, lines ...stock.Line) store.Decision {
	t.Helper()
	var ds []store.Decision
	err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
		var err error
		ds, err = store.ApplyPlaced(testkit.Context(t), tx, []store.Placed{{
			Change: stock.StatusChange{OrderID: orderID, Status: stock.StatusPlaced, Version: version}, Lines: lines}})
		return err
	})
	if err != nil {
		t.Fatalf("place %s: %v", orderID, err)
	}
	return ds[0]
}

func cancel(t *testing.T, pool *pgxpool.Pool, orderID uuid.UUID, version int) {
	t.Helper()
	err := pg.WithTx(testkit.Context(t), pool, func(tx pgx.Tx) error {
		_, err := store.ApplyCancelled(testkit.Context(t), tx, []stock.StatusChange{{OrderID: orderID, Status: stock.StatusCancelled, Version: version}})
		return err
	})
	if err != nil {
		t.Fatalf("cancel %s: %v", orderID, err)
	}
}

// checkReservedMatchesHeld checks the invariant of product_stock: reserved is the sum of
// the held tracked reservations of its product, and never above on hand.
func checkReservedMatchesHeld(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var bad int
	err := pool.QueryRow(testkit.Context(t), `SELECT count(*) FROM product_stock p
WHERE p.reserved <> coalesce((SELECT sum(quantity) FROM reservation r WHERE r.product_id = p.product_id AND r.status = 'held' AND r.tracked), 0)
   OR p.reserved > p.on_hand`).Scan(&bad)
	if err != nil || bad != 0 {
		t.Errorf("%d stock rows whose reserved is not the sum of their held tracked reservations (%v)", bad, err)
	}
}

// An order is held all or nothing (docs/architecture.md, rule 6): one short line rejects
// the whole order and holds none of its lines; untracked products are always reservable;
// a cancel gives the held quantities back, which a later order then gets.
func TestAllOrNothing(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	s := store.New(pool)
	apple, pear, untracked := uuid.New(), uuid.New(), uuid.New()
	setOnHand(t, s, apple, "5")
	setOnHand(t, s, pear, "1.5")

	first := uuid.New()
	d := place(t, pool, first, 2, stock.Line{ProductID: apple, Quantity: "4.000"}, stock.Line{ProductID: untracked, Quantity: "100"})
	if !d.Confirmed() || len(d.Reservations) != 2 || !d.Reservations[0].Tracked || d.Reservations[1].Tracked {
		t.Fatalf("first order: %+v, want both lines held, the apple tracked", d)
	}
	wantLevel(t, s, apple, "5.000", "4.000")

	second := uuid.New()
	d = place(t, pool, second, 2, stock.Line{ProductID: pear, Quantity: "1.5"}, stock.Line{ProductID: apple, Quantity: "2"},
		stock.Line{ProductID: untracked, Quantity: "1"})
	want := []stock.Short{{ProductID: apple, Requested: 2000, Available: 1000}}
	if !d.Won || d.Confirmed() || len(d.Reservations) != 0 || fmt.Sprint(d.Short) != fmt.Sprint(want) {
		t.Fatalf("second order: %+v, want rejected with short %+v", d, want)
	}
	if rs, err := s.Reservations(testkit.Context(t), second); err != nil || len(rs) != 0 {
		t.Errorf("a rejected order holds %+v (%v), want nothing", rs, err)
	}
	wantLevel(t, s, pear, "1.500", "0.000") // the pear line that fitted is not held either

	cancel(t, pool, first, 3)
	wantLevel(t, s, apple, "5.000", "0.000")
	third := uuid.New()
	if d := place(t, pool, third, 2, stock.Line{ProductID: apple, Quantity: "5"}); !d.Confirmed() {
		t.Errorf("an order after the cancel: %+v, want the released units", d)
	}
	wantLevel(t, s, apple, "5.000", "5.000")
	if d := place(t, pool, uuid.New(), 2, stock.Line{ProductID: apple, Quantity: "0.001"}); d.Confirmed() ||
		fmt.Sprint(d.Short) != fmt.Sprint([]stock.Short{{ProductID: apple, Requested: 1, Available: 0}}) {
		t.Errorf("an order for a sold-out product: %+v, want short of 0.001 with 0 available", d)
	}
	checkReservedMatchesHeld(t, pool)
}

// SetOnHand creates the row that makes a product tracked, changes on hand, and refuses
// to go below what is held; a line reserved while the product was untracked never counts
// in its row, even when released after the product became tracked.
func TestSetOnHand(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	s := store.New(pool)
	ctx := testkit.Context(t)
	product := uuid.New()
	if _, err := s.Level(ctx, product); !errors.Is(err, store.ErrNotTracked) {
		t.Fatalf("level of an untracked product: %v, want ErrNotTracked", err)
	}
	early := uuid.New()
	place(t, pool, early, 2, stock.Line{ProductID: product, Quantity: "7"}) // untracked: held, counted nowhere

	if lv := setOnHand(t, s, product, "10"); lv.OnHand != 10000 || lv.Reserved != 0 || lv.Available() != 10000 {
		t.Errorf("new row = %+v, want on hand 10, nothing reserved", lv)
	}
	place(t, pool, uuid.New(), 2, stock.Line{ProductID: product, Quantity: "6"})
	wantLevel(t, s, product, "10.000", "6.000")
	if _, err := s.SetOnHand(ctx, product, 5999); !errors.Is(err, store.ErrBelowReserved) {
		t.Errorf("on hand below reserved: %v, want ErrBelowReserved", err)
	}
	wantLevel(t, s, product, "10.000", "6.000")
	setOnHand(t, s, product, "6")
	wantLevel(t, s, product, "6.000", "6.000")

	cancel(t, pool, early, 3) // releases 7 that never counted: the row keeps its 6
	wantLevel(t, s, product, "6.000", "6.000")
	checkReservedMatchesHeld(t, pool)
}

// Concurrent transactions never oversell (docs/architecture.md, rule 6): 8 workers, each
// applying groups of placed events in one transaction as the inbox's group commit does,
// compete for 50 units of two products with orders of one or both of them, in either line
// order. Exactly as many orders are confirmed as the units allow, none holds a line it was
// refused, no product is reserved beyond its on-hand quantity, and no transaction
// deadlocks (products are locked in id order).
func TestConcurrentPlacementsNeverOversell(t *testing.T) {
	t.Parallel()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	s := store.New(pool)
	a, b := uuid.New(), uuid.New()
	setOnHand(t, s, a, "50")
	setOnHand(t, s, b, "50")

	const workers, groups, perGroup = 8, 10, 5 // 400 orders, about 600 units asked of each product
	type result struct {
		lines []stock.Line
		d     store.Decision
	}
	var (
		mu      sync.Mutex
		results []result
	)
	ctx := testkit.Context(t)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for range groups {
				ps := make([]store.Placed, perGroup)
				for k := range ps {
					var lines []stock.Line
					switch rnd.IntN(3) {
					case 0:
						lines = []stock.Line{{ProductID: a, Quantity: "1"}}
					case 1:
						lines = []stock.Line{{ProductID: b, Quantity: "2"}, {ProductID: a, Quantity: "1"}}
					default:
						lines = []stock.Line{{ProductID: a, Quantity: "2"}, {ProductID: b, Quantity: "1"}}
					}
					ps[k] = store.Placed{Change: stock.StatusChange{OrderID: uuid.New(), Status: stock.StatusPlaced, Version: 2}, Lines: lines}
				}
				var ds []store.Decision
				err := pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
					var err error
					ds, err = store.ApplyPlaced(ctx, tx, ps)
					return err
				})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for k, d := range ds {
					results = append(results, result{ps[k].Lines, d})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a worker failed (a deadlock or the oversold check): %v", err)
	}

	var confirmed, rejected int
	sum := map[uuid.UUID]stock.Quantity{}
	for _, r := range results {
		if r.d.Confirmed() {
			confirmed++
			for _, l := range r.lines {
				q, _ := stock.ParseQuantity(l.Quantity)
				sum[l.ProductID] += q
			}
		} else {
			rejected++
		}
	}
	if confirmed+rejected != workers*groups*perGroup || rejected == 0 {
		t.Fatalf("%d confirmed, %d rejected of %d orders: the units cannot cover them all", confirmed, rejected, workers*groups*perGroup)
	}
	for _, p := range []uuid.UUID{a, b} {
		lv, err := s.Level(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if lv.Reserved != sum[p] || lv.Reserved > lv.OnHand {
			t.Errorf("product %s: reserved %s, confirmed orders hold %s, on hand %s", p, lv.Reserved, sum[p], lv.OnHand)
		}
	}
	// Every order that still fitted when it was decided was confirmed: what is left of
	// each product is less than the smallest order that names it, or nothing asked for it.
	if la, _ := s.Level(ctx, a); la.Available() >= 1000 {
		for _, r := range results {
			if len(r.lines) == 1 && !r.d.Confirmed() {
				t.Errorf("an order of 1 a was rejected while %s of a stayed available", la.Available())
				break
			}
		}
	}
	checkReservedMatchesHeld(t, pool)
}
