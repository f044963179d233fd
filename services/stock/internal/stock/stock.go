// Package stock is the stock service's domain: the on-hand quantities of tracked products,
// the all-or-nothing decision on each placed order, the stock held for each line of a
// confirmed order, and the versioned copy of the order's status that decides whether an
// order event still applies (docs/architecture.md, rules 4 and 6). It knows no SQL and no
// transport.
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
	// Tracked says the product had a stock row when the line was reserved: the line counts
	// in that row's reserved quantity until it is released. A line of an untracked product
	// counts nowhere, even after its product becomes tracked.
	Tracked bool
}

// Level is a tracked product's stock: what is on hand and how much of it reservations hold.
// 0 <= Reserved <= OnHand always (the database checks it too).
type Level struct {
	ProductID uuid.UUID
	OnHand    Quantity
	Reserved  Quantity
}

// Available is what a new reservation may still take: OnHand - Reserved.
func (l Level) Available() Quantity { return l.OnHand - l.Reserved }

// Short is a line that could not be held: its product had less available than requested.
type Short struct {
	ProductID uuid.UUID
	Requested Quantity
	Available Quantity
}

// Decide is the all-or-nothing decision on one placed order (docs/architecture.md, rule 6).
// levels holds the stock rows of the tracked products among the lines, read under their row
// locks; a product missing from it is untracked and always reservable. When every line of a
// tracked product fits in what is available, Decide adds the lines to levels' Reserved (so
// the next decision in the same transaction sees them) and returns no short line. Otherwise
// it changes nothing and returns every short line, in line order. The order service refuses
// two lines of one product, but the contract does not: lines of one product are decided
// in line order against what the lines before them left, so together they never take more
// than is available (a short line names what was left for it).
func Decide(lines []Line, levels map[uuid.UUID]*Level) (short []Short, err error) {
	want := make([]Quantity, len(lines))
	left := make(map[uuid.UUID]Quantity, len(lines))
	for n, l := range lines {
		q, err := ParseQuantity(l.Quantity)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		want[n] = q
		lv, ok := levels[l.ProductID]
		if !ok {
			continue
		}
		avail, seen := left[l.ProductID]
		if !seen {
			avail = lv.Available()
		}
		if q > avail {
			short = append(short, Short{ProductID: l.ProductID, Requested: q, Available: avail})
			continue
		}
		left[l.ProductID] = avail - q
	}
	if len(short) > 0 {
		return short, nil
	}
	for n, l := range lines {
		if lv, ok := levels[l.ProductID]; ok {
			lv.Reserved += want[n]
		}
	}
	return nil, nil
}

// Reserve returns the reservations that hold lines of order orderID: one per line, in
// line order, numbered from 1, each Held with a new UUID v7 id, its quantity written with
// three fraction digits, and Tracked when levels (as given to Decide) holds its product.
// It returns an error wrapping ErrInvalidQuantity for a line whose quantity does not parse,
// and an error when no id can be made.
func Reserve(orderID uuid.UUID, lines []Line, levels map[uuid.UUID]*Level) ([]Reservation, error) {
	out := make([]Reservation, len(lines))
	for n, l := range lines {
		q, err := ParseQuantity(l.Quantity)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("reservation id: %w", err)
		}
		_, tracked := levels[l.ProductID]
		out[n] = Reservation{ID: id, OrderID: orderID, LineNo: n + 1, ProductID: l.ProductID, Quantity: q.String(),
			Status: Held, Tracked: tracked}
	}
	return out, nil
}
