// Package shipping is the shipping service's domain: the versioned copy of an
// order's status and the shipment that follows it.
package shipping

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ErrNotFound means no order status or shipment is known for the order.
var ErrNotFound = errors.New("not found")

// ErrInvalidChange means a status change cannot be applied: an unknown status,
// a version below 1 or a nil order id. Such an event will never succeed.
var ErrInvalidChange = errors.New("invalid status change")

// Status is an order's status as the order service last reported it.
type Status string

// Order statuses carried by the order events.
const (
	// StatusPlaced comes from order.order.placed.v1: stock has not answered yet.
	StatusPlaced Status = "placed"
	// StatusConfirmed comes from order.order.confirmed.v1: stock holds every line.
	StatusConfirmed Status = "confirmed"
	// StatusRejected comes from order.order.rejected.v1: stock could not hold it.
	StatusRejected Status = "rejected"
	// StatusCancelled comes from order.order.cancelled.v1.
	StatusCancelled Status = "cancelled"
)

// ShipmentStatus is the state of an order's shipment.
type ShipmentStatus string

// Shipment statuses (the CHECK constraint of the shipment table).
const (
	// ShipmentPending is the shipment of a placed order: waiting for stock's answer.
	ShipmentPending ShipmentStatus = "pending"
	// ShipmentReady is the shipment of a confirmed order: stock holds its goods.
	ShipmentReady ShipmentStatus = "ready"
	// ShipmentCancelled is the shipment of a rejected or cancelled order.
	ShipmentCancelled ShipmentStatus = "cancelled"
)

// StatusChange is what an order event says: order OrderID reached Status at
// Version. Only Version decides which of two changes is newer (docs/architecture.md,
// rule 4); event ids and occurred_at never do.
type StatusChange struct {
	OrderID uuid.UUID // the order the event is about
	Status  Status    // from the event name: placed, confirmed, rejected or cancelled
	Version int       // the order's version after the change (payload version, >= 1)
}

// Validate returns an error wrapping ErrInvalidChange when c cannot be applied.
func (c StatusChange) Validate() error {
	switch {
	case c.OrderID == uuid.Nil:
		return fmt.Errorf("%w: nil order id", ErrInvalidChange)
	case c.Version < 1:
		return fmt.Errorf("%w: order %s: version %d below 1", ErrInvalidChange, c.OrderID, c.Version)
	}
	if _, err := ShipmentStatusFor(c.Status); err != nil {
		return fmt.Errorf("order %s: %w", c.OrderID, err)
	}
	return nil
}

// ShipmentStatusFor returns the shipment status that follows an order status:
// placed -> pending, confirmed -> ready, rejected and cancelled -> cancelled. An
// unknown status returns an error wrapping ErrInvalidChange.
func ShipmentStatusFor(s Status) (ShipmentStatus, error) {
	switch s {
	case StatusPlaced:
		return ShipmentPending, nil
	case StatusConfirmed:
		return ShipmentReady, nil
	case StatusRejected, StatusCancelled:
		return ShipmentCancelled, nil
	default:
		return "", fmt.Errorf("%w: unknown order status %q", ErrInvalidChange, s)
	}
}

// OrderStatus is the stored copy of an order's status.
type OrderStatus struct {
	OrderID   uuid.UUID
	Status    Status    // the status of the highest version seen
	Version   int       // the highest version seen (>= 1)
	UpdatedAt time.Time // when that version was recorded (database clock)
}

// Shipment is the shipment of one order.
type Shipment struct {
	ID        uuid.UUID      // UUID v7, set when the shipment is created
	OrderID   uuid.UUID      // at most one shipment per order
	Status    ShipmentStatus // follows the order's winning status
	CreatedAt time.Time      // database clock
	UpdatedAt time.Time      // last status change, database clock
}
