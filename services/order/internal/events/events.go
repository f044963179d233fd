// Package events maps the domain events an order's transitions record to the
// contract's events, the ones the store writes to the outbox in the order's
// transaction (docs/architecture.md rule 1).
package events

import (
	"fmt"

	"example.com/shop/contracts"
	"example.com/shop/services/order/internal/order"
)

// Outbox returns the contract event name and payload of e: order.order.placed.v1
// with a contracts.OrderPlaced for order.EventPlaced, order.order.cancelled.v1 with
// a contracts.OrderCancelled for order.EventCancelled. Quantities are written with
// three fraction digits ("2.000"). It returns an error for an unknown kind.
func Outbox(e order.Event) (name string, payload any, err error) {
	lines := make([]contracts.OrderLine, len(e.Lines))
	for i, l := range e.Lines {
		lines[i] = contracts.OrderLine{ProductID: l.ProductID, Quantity: l.Quantity.String()}
	}
	p := contracts.OrderPlaced{OrderID: e.OrderID, CustomerID: e.CustomerID, Lines: lines, Version: e.Version}
	switch e.Kind {
	case order.EventPlaced:
		return contracts.EventOrderPlaced, p, nil
	case order.EventCancelled:
		return contracts.EventOrderCancelled, contracts.OrderCancelled(p), nil
	}
	return "", nil, fmt.Errorf("order %s: no contract event for kind %q", e.OrderID, e.Kind)
}
