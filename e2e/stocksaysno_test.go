package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// TestStockSaysNo runs the answer leg on real processes: a product tracked with
// one unit on hand, two orders of one unit each placed at once. Stock holds the
// unit for one and answers it confirmed; it holds nothing for the other and
// answers it rejected, both through its outbox and `stock relay`. Order consumes
// the answers: one order is confirmed (shipment ready), the other rejected with
// the reason insufficient_stock and the short line in GET /orders/{id}'s
// rejection (shipment cancelled). The product is never oversold.
func TestStockSaysNo(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	product := uuid.NewString()
	if err := s.api.PutStock(ctx, product, "1.000"); err != nil {
		t.Fatal(err)
	}
	var orders [2]system.Order
	for i := range orders {
		o, err := s.api.CreateOrder(ctx, uuid.NewString(), []system.Line{{ProductID: product, Quantity: "1.000"}})
		if err != nil {
			t.Fatal(err)
		}
		orders[i] = o
	}
	var wg sync.WaitGroup
	for _, o := range orders {
		wg.Go(func() { s.place(ctx, o.ID, http.StatusOK) })
	}
	wg.Wait()

	answered := map[string]system.Order{}
	eventually(t, "both orders answered", func() string {
		for _, o := range orders {
			got, code, err := s.api.Order(ctx, o.ID)
			if err != nil || code != http.StatusOK {
				return fmt.Sprintf("order %s: %d %v", o.ID, code, err)
			}
			if got.Status != "confirmed" && got.Status != "rejected" {
				return fmt.Sprintf("order %s is %s", o.ID, got.Status)
			}
			answered[got.Status] = got
		}
		return ""
	})
	confirmed, rejected := answered["confirmed"], answered["rejected"]
	if confirmed.ID == "" || rejected.ID == "" {
		t.Fatalf("answers %+v, want one confirmed and one rejected", answered)
	}
	if confirmed.Version != 3 || confirmed.Rejection != nil {
		t.Errorf("confirmed order %+v, want version 3 and no rejection", confirmed)
	}
	want := contracts.Rejection{Reason: contracts.RejectionInsufficientStock,
		Lines: []contracts.ShortLine{{ProductID: uuid.MustParse(product), Requested: "1.000", Available: "0.000"}}}
	if rejected.Version != 3 || rejected.Rejection == nil || fmt.Sprint(*rejected.Rejection) != fmt.Sprint(want) {
		t.Errorf("rejected order %+v (rejection %+v), want version 3 and rejection %+v", rejected, rejected.Rejection, want)
	}

	s.waitShipping(ctx, confirmed.ID, "confirmed", 3, "ready")
	s.waitShipping(ctx, rejected.ID, "rejected", 3, "cancelled")
	if rs, err := s.api.Reservations(ctx, rejected.ID); err != nil || len(rs) != 0 {
		t.Errorf("reservations of the rejected order = %+v (err %v), want none", rs, err)
	}
	s.waitReserved(ctx, confirmed)
	assertStock(t, ctx, s, product, "1.000", "1.000", "0.000")
	r := s.invariants(ctx)
	if r.Orders["confirmed"] != 1 || r.Orders["rejected"] != 1 || r.Processed[contracts.ConsumerOrder] != 2 {
		t.Errorf("report %+v, want 1 confirmed, 1 rejected, 2 answers processed by order", r)
	}
}

// assertStock checks GET /products/{id}/stock.
func assertStock(t *testing.T, ctx context.Context, s *testSystem, product, onHand, reserved, available string) {
	t.Helper()
	got, err := s.api.Stock(ctx, product)
	if err != nil {
		t.Fatal(err)
	}
	if got.OnHand != onHand || got.Reserved != reserved || got.Available != available {
		t.Errorf("stock of %s = %+v, want on hand %s, reserved %s, available %s", product, got, onHand, reserved, available)
	}
}
