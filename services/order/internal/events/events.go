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
// a contracts.OrderCancelled for order.EventCancelled, order.order.confirmed.v1
// with a contracts.OrderConfirmed for order.EventConfirmed, order.order.rejected.v1
// with a contracts.OrderRejected (the order and its rejection) for
// order.EventRejected. Quantities are written with three fraction digits
// ("2.000"). It returns an error for an unknown kind, or a rejected event without
// its rejection.
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
	case order.EventConfirmed:
		return contracts.EventOrderConfirmed, contracts.OrderConfirmed(p), nil
	case order.EventRejected:
		if e.Rejection == nil {
			return "", nil, fmt.Errorf("order %s: rejected event without its rejection", e.OrderID)
		}
		return contracts.EventOrderRejected, contracts.OrderRejected{OrderID: p.OrderID, CustomerID: p.CustomerID,
			Lines: p.Lines, Version: p.Version, Rejection: RejectionContract(*e.Rejection)}, nil
	}
	return "", nil, fmt.Errorf("order %s: no contract event for kind %q", e.OrderID, e.Kind)
}

// RejectionContract is r in the contract's form, the form the order keeps it in
// (orders.rejection) and shows it in.
func RejectionContract(r order.Rejection) contracts.Rejection {
	lines := make([]contracts.ShortLine, len(r.Lines))
	for i, l := range r.Lines {
		lines[i] = contracts.ShortLine{ProductID: l.ProductID, Requested: l.Requested.String(), Available: l.Available}
	}
	return contracts.Rejection{Reason: r.Reason, Lines: lines}
}

// RejectionFromContract is the domain form of r, as stock's answer or the stored column
// carries it; an error when a requested quantity is not a valid order quantity.
func RejectionFromContract(r contracts.Rejection) (order.Rejection, error) {
	lines := make([]order.ShortLine, len(r.Lines))
	for i, l := range r.Lines {
		q, err := order.ParseQuantity(l.Requested)
		if err != nil {
			return order.Rejection{}, fmt.Errorf("rejection line %d: %w", i+1, err)
		}
		lines[i] = order.ShortLine{ProductID: l.ProductID, Requested: q, Available: l.Available}
	}
	return order.Rejection{Reason: r.Reason, Lines: lines}, nil
}
