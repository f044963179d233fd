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
	rs, err := stock.Reserve(orderID, lines)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(lines) {
		t.Fatalf("got %d reservations, want %d", len(rs), len(lines))
	}
	for n, r := range rs {
		if r.OrderID != orderID || r.LineNo != n+1 || r.ProductID != lines[n].ProductID || r.Quantity != lines[n].Quantity || r.ID.Version() != 7 {
			t.Errorf("reservation %d = %+v", n, r)
		}
	}
	if rs[0].ID == rs[1].ID {
		t.Error("two reservations share an id")
	}
}
