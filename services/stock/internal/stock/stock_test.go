package stock_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"example.com/shop/services/stock/internal/stock"
)

func TestStatusChangeValidate(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	for _, c := range []stock.StatusChange{
		{OrderID: id, Status: stock.StatusPlaced, Version: 1},
		{OrderID: id, Status: stock.StatusCancelled, Version: 9},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", c, err)
		}
	}
	for _, c := range []stock.StatusChange{
		{OrderID: uuid.Nil, Status: stock.StatusPlaced, Version: 1},
		{OrderID: id, Status: stock.StatusPlaced, Version: 0},
		{OrderID: id, Status: "shipped", Version: 1},
	} {
		if err := c.Validate(); !errors.Is(err, stock.ErrInvalidChange) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidChange", c, err)
		}
	}
}

func TestReserveNumbersTheLines(t *testing.T) {
	t.Parallel()
	orderID := uuid.New()
	lines := []stock.Line{{ProductID: uuid.New(), Quantity: "1.000"}, {ProductID: uuid.New(), Quantity: "0.250"}}
	tracked := lines[1].ProductID
	rs, err := stock.Reserve(orderID, lines, map[uuid.UUID]*stock.Level{tracked: {ProductID: tracked, OnHand: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(lines) {
		t.Fatalf("got %d reservations, want %d", len(rs), len(lines))
	}
	for n, r := range rs {
		if r.OrderID != orderID || r.LineNo != n+1 || r.ProductID != lines[n].ProductID || r.Quantity != lines[n].Quantity || r.ID.Version() != 7 ||
			r.Tracked != (n == 1) || r.Status != stock.Held {
			t.Errorf("reservation %d = %+v", n, r)
		}
	}
	if rs[0].ID == rs[1].ID {
		t.Error("two reservations share an id")
	}
}

func TestQuantity(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"0": "0.000", "0.000": "0.000", "10": "10.000", "2.5": "2.500", "007.125": "7.125",
		"999999999.999": "999999999.999", "0.001": "0.001"} {
		q, err := stock.ParseQuantity(in)
		if err != nil || q.String() != want {
			t.Errorf("ParseQuantity(%q) = %s, %v; want %s", in, q, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.2345", "1e3", "1.", ".5", " 1", "1000000000", "1,5", "0x10", "+1"} {
		if q, err := stock.ParseQuantity(in); !errors.Is(err, stock.ErrInvalidQuantity) {
			t.Errorf("ParseQuantity(%q) = %s, %v; want ErrInvalidQuantity", in, q, err)
		}
	}
	if q, _ := stock.ParseQuantity("999999999.999"); q != stock.MaxQuantity {
		t.Errorf("the largest quantity parses to %d, want MaxQuantity", q)
	}
}

// Decide holds an order all or nothing against the levels of its tracked products, and
// the next decision sees what the one before took.
func TestDecide(t *testing.T) {
	t.Parallel()
	a, b, free := uuid.New(), uuid.New(), uuid.New()
	levels := map[uuid.UUID]*stock.Level{a: {ProductID: a, OnHand: 5000, Reserved: 1000}, b: {ProductID: b, OnHand: 2000}}
	short, err := stock.Decide([]stock.Line{{ProductID: a, Quantity: "4"}, {ProductID: free, Quantity: "1000"}}, levels)
	if err != nil || short != nil || levels[a].Reserved != 5000 {
		t.Fatalf("an order that fits: short %+v, %v, a reserved %s", short, err, levels[a].Reserved)
	}
	short, err = stock.Decide([]stock.Line{{ProductID: b, Quantity: "1"}, {ProductID: a, Quantity: "0.001"}, {ProductID: b, Quantity: "1"}}, levels)
	if err != nil || len(short) != 1 || short[0] != (stock.Short{ProductID: a, Requested: 1, Available: 0}) {
		t.Fatalf("an order short of a: %+v, %v", short, err)
	}
	if levels[b].Reserved != 0 || levels[a].Reserved != 5000 {
		t.Errorf("a refused order changed the levels: a %s, b %s", levels[a].Reserved, levels[b].Reserved)
	}
	// Two lines of one product (a placed event the order service would not write) are
	// decided together: each fits alone, both do not.
	short, err = stock.Decide([]stock.Line{{ProductID: b, Quantity: "1.5"}, {ProductID: b, Quantity: "1"}}, levels)
	if err != nil || len(short) != 1 || short[0] != (stock.Short{ProductID: b, Requested: 1000, Available: 500}) {
		t.Fatalf("two lines of b beyond its stock: %+v, %v", short, err)
	}
	if levels[b].Reserved != 0 {
		t.Errorf("a refused order changed b: reserved %s", levels[b].Reserved)
	}
	short, err = stock.Decide([]stock.Line{{ProductID: b, Quantity: "1.5"}, {ProductID: b, Quantity: "0.5"}}, levels)
	if err != nil || short != nil || levels[b].Reserved != 2000 {
		t.Fatalf("two lines of b that fit together: short %+v, %v, b reserved %s", short, err, levels[b].Reserved)
	}
	if _, err := stock.Decide([]stock.Line{{ProductID: a, Quantity: "x"}}, levels); !errors.Is(err, stock.ErrInvalidQuantity) {
		t.Errorf("a bad quantity: %v, want ErrInvalidQuantity", err)
	}
}
