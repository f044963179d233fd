// Package stock is the stock service's domain: the stock held for each line of a placed
// order, and the versioned copy of the order's status that decides whether an order event
// still applies (docs/architecture.md, rule 4). It knows no SQL and no transport.
package stock

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// ErrInvalidChange means a status change can never be applied: an unknown status, a
// version below 1 or a nil order id. Such an event is dead-lettered, never retried.
var ErrInvalidChange = errors.New("invalid status change")

// Status is an order's status as the order service last reported it.
type Status string

// Order statuses carried by the order events.
const (
	// StatusPlaced comes from order.order.placed.v1: the order's lines are held.
	StatusPlaced Status = "placed"
	// StatusCancelled comes from order.order.cancelled.v1: nothing is held for it.
	StatusCancelled Status = "cancelled"
)

// StatusChange is what an order event says: order OrderID reached Status at Version.
// Only Version decides which of two changes is newer (docs/architecture.md, rule 4);
// event ids and occurred_at never do.
type StatusChange struct {
	OrderID uuid.UUID // the order the event is about
	Status  Status    // StatusPlaced or StatusCancelled, from the event name
	Version int       // the order's version after the change (payload version, >= 1)
}

// Validate returns an error wrapping ErrInvalidChange when c cannot be applied.
func (c StatusChange) Validate() error {
	switch {
	case c.OrderID == uuid.Nil:
		return fmt.Errorf("%w: nil order id", ErrInvalidChange)
	case c.Version < 1:
		return fmt.Errorf("%w: order %s: version %d below 1", ErrInvalidChange, c.OrderID, c.Version)
	case c.Status != StatusPlaced && c.Status != StatusCancelled:
		return fmt.Errorf("%w: order %s: unknown status %q", ErrInvalidChange, c.OrderID, c.Status)
	}
	return nil
}

// Line is one line of a placed order: a product and its quantity.
type Line struct {
	ProductID uuid.UUID
	Quantity  string // decimal with three fraction digits, such as "2.000"
}

// ReservationStatus says whether a reservation still holds its stock.
type ReservationStatus string

// Reservation statuses.
const (
	// Held: the line's stock is held for the placed order.
	Held ReservationStatus = "held"
	// Released: the order was cancelled and the stock is free again; the row stays as
	// the record of the release.
	Released ReservationStatus = "released"
)

// Reservation is the stock held for one order line.
type Reservation struct {
	ID        uuid.UUID // UUID v7
	OrderID   uuid.UUID
	LineNo    int // position of the line in the order, from 1
	ProductID uuid.UUID
	Quantity  string            // decimal with three fraction digits, such as "2.000"
	Status    ReservationStatus // Held, or Released once the order is cancelled
}

// Reserve returns the reservations that hold lines of order orderID: one per line, in
// line order, numbered from 1, each Held with a new UUID v7 id. It fails only when no id
// can be made.
func Reserve(orderID uuid.UUID, lines []Line) ([]Reservation, error) {
	out := make([]Reservation, len(lines))
	for n, l := range lines {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("reservation id: %w", err)
		}
		out[n] = Reservation{ID: id, OrderID: orderID, LineNo: n + 1, ProductID: l.ProductID, Quantity: l.Quantity, Status: Held}
	}
	return out, nil
}
