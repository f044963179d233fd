package shipping_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"example.com/shop/services/shipping/internal/shipping"
)

func TestShipmentStatusFor(t *testing.T) {
	t.Parallel()
	for in, want := range map[shipping.Status]shipping.ShipmentStatus{
		shipping.StatusPlaced:    shipping.ShipmentPending,
		shipping.StatusConfirmed: shipping.ShipmentReady,
		shipping.StatusRejected:  shipping.ShipmentCancelled,
		shipping.StatusCancelled: shipping.ShipmentCancelled,
	} {
		got, err := shipping.ShipmentStatusFor(in)
		if err != nil || got != want {
			t.Errorf("ShipmentStatusFor(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := shipping.ShipmentStatusFor("draft"); !errors.Is(err, shipping.ErrInvalidChange) {
		t.Errorf("ShipmentStatusFor(draft): err = %v, want ErrInvalidChange", err)
	}
}

func TestStatusChangeValidate(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	tests := []struct {
		c     shipping.StatusChange
		valid bool
	}{
		{shipping.StatusChange{OrderID: id, Status: shipping.StatusPlaced, Version: 1}, true},
		{shipping.StatusChange{OrderID: id, Status: shipping.StatusCancelled, Version: 7}, true},
		{shipping.StatusChange{OrderID: id, Status: shipping.StatusConfirmed, Version: 3}, true},
		{shipping.StatusChange{OrderID: id, Status: shipping.StatusRejected, Version: 3}, true},
		{shipping.StatusChange{OrderID: uuid.Nil, Status: shipping.StatusPlaced, Version: 1}, false},
		{shipping.StatusChange{OrderID: id, Status: shipping.StatusPlaced, Version: 0}, false},
		{shipping.StatusChange{OrderID: id, Status: "shipped", Version: 1}, false},
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		if tt.valid && err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", tt.c, err)
		}
		if !tt.valid && !errors.Is(err, shipping.ErrInvalidChange) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidChange", tt.c, err)
		}
	}
}
