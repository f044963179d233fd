// Package order is the order domain: the Order aggregate, its place/cancel
// state machine and the events its transitions record (docs/architecture.md, rule 1).
package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/looplab/fsm"
)

// Status is the life-cycle state of an order.
type Status string

// The states of the order state machine. An order starts as a draft; place
// moves a draft to placed; cancel moves a draft or a placed order to cancelled,
// which is final.
const (
	StatusDraft     Status = "draft"
	StatusPlaced    Status = "placed"
	StatusCancelled Status = "cancelled"
)

// Transition names of the state machine.
const (
	transitionPlace  = "place"
	transitionCancel = "cancel"
)

// MaxLines is the largest number of lines an order may have.
const MaxLines = 100

// Errors returned by this package; match them with errors.Is.
var (
	// ErrNotFound means no order has the requested id.
	ErrNotFound = errors.New("order not found")
	// ErrInvalidTransition means the order's status does not allow the transition.
	ErrInvalidTransition = errors.New("transition not allowed")
	// ErrNotDraft means place was asked of an order that is not a draft; it wraps
	// ErrInvalidTransition.
	ErrNotDraft = fmt.Errorf("order is not a draft: %w", ErrInvalidTransition)
	// ErrAlreadyCancelled means cancel was asked of a cancelled order; it wraps
	// ErrInvalidTransition.
	ErrAlreadyCancelled = fmt.Errorf("order is already cancelled: %w", ErrInvalidTransition)

	// ErrRequired means a mandatory value is missing (a nil UUID counts as missing).
	ErrRequired = errors.New("is required")
	// ErrInvalidQuantity means a quantity is not a decimal greater than zero with at most
	// MaxIntegerDigits integer digits and Scale fraction digits.
	ErrInvalidQuantity = errors.New("invalid quantity")
	// ErrNoLines means an order has no lines.
	ErrNoLines = errors.New("an order needs at least one line")
	// ErrTooManyLines means an order has more than MaxLines lines.
	ErrTooManyLines = fmt.Errorf("an order has at most %d lines", MaxLines)
	// ErrDuplicateProduct means two lines of one order name the same product.
	ErrDuplicateProduct = errors.New("product appears on another line")
)

// FieldError reports an invalid input value and names it with the path of the
// matching field of the order's JSON form, such as "customer_id" or
// "lines[2].quantity".
type FieldError struct {
	// Field is the path of the offending value.
	Field string
	// Err is the reason, one of this package's sentinel errors, possibly wrapped.
	Err error
}

// Error returns "<field>: <reason>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the reason, so errors.Is matches the sentinel.
func (e *FieldError) Unwrap() error { return e.Err }

// Line is one product of an order and its quantity. It is a value; New checks
// it when it becomes part of an order.
type Line struct {
	// ProductID identifies the product; never the nil UUID.
	ProductID uuid.UUID
	// Quantity is how much of the product is ordered; never the zero Quantity.
	Quantity Quantity
}

// EventKind says which transition recorded an Event.
type EventKind string

// The kinds of event the transitions record.
const (
	// EventPlaced is recorded by Place.
	EventPlaced EventKind = "placed"
	// EventCancelled is recorded by Cancel.
	EventCancelled EventKind = "cancelled"
)

// Event is a domain event recorded by a transition, to be written to the
// outbox in the transaction that saves the order (package events maps it to the
// contract). It holds the order as the transition left it.
type Event struct {
	Kind       EventKind
	OrderID    uuid.UUID
	CustomerID uuid.UUID
	Lines      []Line
	Version    int // the order's version after the transition
}

// Order is the order aggregate. Its fields are unexported: New and
// FromDatabase are the only ways to build one, and Place and Cancel the only
// ways to change it. An Order is not safe for concurrent use.
type Order struct {
	id         uuid.UUID
	customerID uuid.UUID
	lines      []Line
	version    int
	createdAt  time.Time
	updatedAt  time.Time
	machine    *fsm.FSM
	events     []Event
}

// New returns a new draft order at version 1, created and updated at now
// (kept in UTC at microsecond precision, as PostgreSQL stores it). It checks
// its input and returns a *FieldError wrapping ErrRequired (nil id or customer
// id or product id), ErrNoLines, ErrTooManyLines, ErrInvalidQuantity (a zero
// Quantity) or ErrDuplicateProduct, naming the first failing field.
func New(id, customerID uuid.UUID, lines []Line, now time.Time) (*Order, error) {
	if id == uuid.Nil {
		return nil, &FieldError{Field: "id", Err: ErrRequired}
	}
	if customerID == uuid.Nil {
		return nil, &FieldError{Field: "customer_id", Err: ErrRequired}
	}
	if err := checkLines(lines); err != nil {
		return nil, err
	}
	now = dbTime(now)
	return newOrder(id, customerID, lines, StatusDraft, 1, now, now), nil
}

// FromDatabase rebuilds an order from its stored columns, recording no event.
// It returns an error when the stored values break an invariant (unknown
// status, version below 1, invalid lines), which means the data is corrupt.
func FromDatabase(id, customerID uuid.UUID, status Status, version int, lines []Line, createdAt, updatedAt time.Time) (*Order, error) {
	switch status {
	case StatusDraft, StatusPlaced, StatusCancelled:
	default:
		return nil, fmt.Errorf("order %s: unknown status %q", id, status)
	}
	if version < 1 {
		return nil, fmt.Errorf("order %s: version %d below 1", id, version)
	}
	if id == uuid.Nil || customerID == uuid.Nil {
		return nil, fmt.Errorf("order %s: nil id or customer id", id)
	}
	if err := checkLines(lines); err != nil {
		return nil, fmt.Errorf("order %s: %w", id, err)
	}
	return newOrder(id, customerID, lines, status, version, createdAt.UTC(), updatedAt.UTC()), nil
}

func checkLines(lines []Line) error {
	if len(lines) == 0 {
		return &FieldError{Field: "lines", Err: ErrNoLines}
	}
	if len(lines) > MaxLines {
		return &FieldError{Field: "lines", Err: ErrTooManyLines}
	}
	seen := make(map[uuid.UUID]struct{}, len(lines))
	for i, l := range lines {
		if l.ProductID == uuid.Nil {
			return &FieldError{Field: fmt.Sprintf("lines[%d].product_id", i), Err: ErrRequired}
		}
		if _, dup := seen[l.ProductID]; dup {
			return &FieldError{Field: fmt.Sprintf("lines[%d].product_id", i), Err: ErrDuplicateProduct}
		}
		seen[l.ProductID] = struct{}{}
		if l.Quantity.IsZero() {
			return &FieldError{Field: fmt.Sprintf("lines[%d].quantity", i), Err: fmt.Errorf("%w: is required", ErrInvalidQuantity)}
		}
	}
	return nil
}

func newOrder(id, customerID uuid.UUID, lines []Line, status Status, version int, createdAt, updatedAt time.Time) *Order {
	o := &Order{
		id:         id,
		customerID: customerID,
		lines:      append([]Line(nil), lines...),
		version:    version,
		createdAt:  createdAt,
		updatedAt:  updatedAt,
	}
	// The completion callbacks (enter_<state>) are where a transition becomes a business
	// fact: they bump the version and record the event that the repository writes to the
	// outbox in the same transaction, whichever entry point ran the transition.
	o.machine = fsm.NewFSM(string(status),
		fsm.Events{
			{Name: transitionPlace, Src: []string{string(StatusDraft)}, Dst: string(StatusPlaced)},
			{Name: transitionCancel, Src: []string{string(StatusDraft), string(StatusPlaced)}, Dst: string(StatusCancelled)},
		},
		fsm.Callbacks{
			"enter_" + string(StatusPlaced): func(_ context.Context, e *fsm.Event) {
				o.applied(e, EventPlaced)
			},
			"enter_" + string(StatusCancelled): func(_ context.Context, e *fsm.Event) {
				o.applied(e, EventCancelled)
			},
		},
	)
	return o
}

// applied finishes a transition: the order gets its next version and the time passed to
// Place or Cancel (the event's only argument), then records an event of kind.
func (o *Order) applied(e *fsm.Event, kind EventKind) {
	o.version++
	if len(e.Args) == 1 {
		if now, ok := e.Args[0].(time.Time); ok {
			o.updatedAt = now
		}
	}
	o.events = append(o.events, Event{
		Kind: kind, OrderID: o.id, CustomerID: o.customerID, Lines: o.Lines(), Version: o.version,
	})
}

// Place moves a draft order to placed at time now: the version grows by one and
// an order.order.placed.v1 event is recorded. It returns an error wrapping
// ErrNotDraft (and so ErrInvalidTransition) when the order is not a draft, in
// which case nothing changes.
func (o *Order) Place(now time.Time) error {
	return o.fire(transitionPlace, now, ErrNotDraft)
}

// Cancel moves a draft or placed order to cancelled at time now: the version
// grows by one and an order.order.cancelled.v1 event is recorded. It returns an
// error wrapping ErrAlreadyCancelled (and so ErrInvalidTransition) when the
// order is already cancelled, in which case nothing changes.
func (o *Order) Cancel(now time.Time) error {
	return o.fire(transitionCancel, now, ErrAlreadyCancelled)
}

func (o *Order) fire(transition string, now time.Time, refused error) error {
	from := o.machine.Current()
	if o.machine.Cannot(transition) {
		return fmt.Errorf("%s order %s in status %s: %w", transition, o.id, from, refused)
	}
	// The state machine does no I/O; its context only reaches the callbacks above.
	if err := o.machine.Event(context.Background(), transition, dbTime(now)); err != nil {
		return fmt.Errorf("%s order %s in status %s: %w", transition, o.id, from, err)
	}
	return nil
}

// dbTime is t in UTC at the microsecond precision of a timestamptz column.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// ID returns the order's id.
func (o *Order) ID() uuid.UUID { return o.id }

// CustomerID returns the id of the customer who owns the order.
func (o *Order) CustomerID() uuid.UUID { return o.customerID }

// Status returns the current state.
func (o *Order) Status() Status { return Status(o.machine.Current()) }

// Version returns the order's version: 1 when created, one more after each
// applied transition.
func (o *Order) Version() int { return o.version }

// Lines returns a copy of the order's lines, in the order they were given.
func (o *Order) Lines() []Line { return append([]Line(nil), o.lines...) }

// CreatedAt returns when the order was created (UTC).
func (o *Order) CreatedAt() time.Time { return o.createdAt }

// UpdatedAt returns when the order last changed (UTC).
func (o *Order) UpdatedAt() time.Time { return o.updatedAt }

// Events returns the events recorded by the transitions applied since the
// order was built, oldest first, in a fresh slice.
func (o *Order) Events() []Event { return append([]Event(nil), o.events...) }
