package main

import "testing"

func TestEventTitle(t *testing.T) {
	for in, want := range map[string]string{"order.order.placed.v1": "Order placed", "stock.reservation.confirmed.v1": "Stock reservation confirmed"} {
		if got := eventTitle(in); got != want {
			t.Errorf("eventTitle(%s) = %q, want %q", in, got, want)
		}
	}
}
