package e2e_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"

	"example.com/shop/testkit"
)

// TestCancelRightAfterPlace cancels orders the moment they are placed, so
// the cancelled event can overtake the placed one inside a consumer: whatever
// the order of arrival, no reservation stays held and shipping ends at the
// cancelled version.
func TestCancelRightAfterPlace(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)

	const perClient, clients = 7, 4
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range perClient {
				o, err := s.api.CreateOrder(ctx, uuid.NewString(), newLines(2))
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				if st, err := s.api.Place(ctx, o.ID); err != nil || st != http.StatusOK {
					t.Errorf("place %s: %d %v", o.ID, st, err)
					return
				}
				if st, err := s.api.Cancel(ctx, o.ID); err != nil || st != http.StatusOK {
					t.Errorf("cancel %s: %d %v", o.ID, st, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	r := s.invariants(ctx)
	if r.Orders["cancelled"] != perClient*clients || r.ReservedLines != 0 {
		t.Errorf("orders %v, reserved lines %d; want %d cancelled and none held", r.Orders, r.ReservedLines, perClient*clients)
	}
}
