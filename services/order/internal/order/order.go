// Package order is the order domain: the Order aggregate, its state machine
// (place, confirm or reject on stock's answer, cancel) and the events its
// transitions record (docs/architecture.md, rules 1 and 7).
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
// moves a draft to placed; stock's answer moves a placed order to confirmed
// (every line held) or rejected (nothing held), which is final; cancel moves a
// draft, placed or confirmed order to cancelled, which is final.
//
//	draft --place--> placed --confirm--> confirmed
//	                   |  \--reject---> rejected
//	draft, placed, confirmed --cancel--> cancelled
const (
	StatusDraft     Status = "draft"
	StatusPlaced    Status = "placed"
	StatusConfirmed Status = "confirmed"
	StatusRejected  Status = "rejected"
	StatusCancelled Status = "cancelled"
)

// Transition names of the state machine.
const (
	transitionPlace   = "place"
	transitionConfirm = "confirm"
	transitionReject  = "reject"
	transitionCancel  = "cancel"
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
	// ErrRejected means cancel was asked of an order stock rejected; it wraps
	// ErrInvalidTransition.
	ErrRejected = fmt.Errorf("order was rejected: %w", ErrInvalidTransition)
	// ErrAnswerOutdated means stock's answer is about a placement the order has moved
	// on from (cancelled, already answered, or another version): it changes nothing
	// (docs/architecture.md, rule 7). It wraps ErrInvalidTransition.
	ErrAnswerOutdated = fmt.Errorf("the order has moved on from the placement this answers: %w", ErrInvalidTransition)
	// ErrInvalidRejection means a rejection without a reason or without short lines.
	ErrInvalidRejection = errors.New("a rejection needs a reason and at least one short line")

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
	// EventConfirmed is recorded by Confirm.
	EventConfirmed EventKind = "confirmed"
	// EventRejected is recorded by Reject.
	EventRejected EventKind = "rejected"
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
	Version    int        // the order's version after the transition
	Rejection  *Rejection // for EventRejected only
}

// Rejection is why stock refused a placed order, as its answer said.
type Rejection struct {
	// Reason is stock's reason, such as "insufficient_stock".
	Reason string
	// Lines are the lines stock could not hold; never empty.
	Lines []ShortLine
}

// ShortLine is a line stock could not hold.
type ShortLine struct {
	ProductID uuid.UUID
	// Requested is the line's quantity.
	Requested Quantity
	// Available is what stock had free for the product then: a decimal with three
	// fraction digits, zero or greater, such as "0.000" (so no Quantity, which is never
	// zero).
	Available string
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
	rejection  *Rejection
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

// FromDatabase rebuilds an order from its stored columns, recording no event;
// rejection is the stored rejection, nil unless the order was rejected. It
// returns an error when the stored values break an invariant (unknown status,
// version below 1, invalid lines, a rejection on an order that was not
// rejected or none on one that was), which means the data is corrupt.
func FromDatabase(id, customerID uuid.UUID, status Status, version int, lines []Line, createdAt, updatedAt time.Time, rejection *Rejection) (*Order, error) {
	switch status {
	case StatusDraft, StatusPlaced, StatusConfirmed, StatusRejected, StatusCancelled:
	default:
		return nil, fmt.Errorf("order %s: unknown status %q", id, status)
	}
	// A cancelled order may keep no rejection: only placed and confirmed orders are cancelled.
	if (status == StatusRejected) != (rejection != nil) {
		return nil, fmt.Errorf("order %s: status %s with rejection %v", id, status, rejection)
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
	o := newOrder(id, customerID, lines, status, version, createdAt.UTC(), updatedAt.UTC())
	o.rejection = rejection.clone()
	return o, nil
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
			{Name: transitionConfirm, Src: []string{string(StatusPlaced)}, Dst: string(StatusConfirmed)},
			{Name: transitionReject, Src: []string{string(StatusPlaced)}, Dst: string(StatusRejected)},
			{Name: transitionCancel, Src: []string{string(StatusDraft), string(StatusPlaced), string(StatusConfirmed)}, Dst: string(StatusCancelled)},
		},
		fsm.Callbacks{
			"enter_" + string(StatusPlaced): func(_ context.Context, e *fsm.Event) {
				o.applied(e, EventPlaced)
			},
			"enter_" + string(StatusConfirmed): func(_ context.Context, e *fsm.Event) {
				o.applied(e, EventConfirmed)
			},
			"enter_" + string(StatusRejected): func(_ context.Context, e *fsm.Event) {
				o.applied(e, EventRejected)
			},
			"enter_" + string(StatusCancelled): func(_ context.Context, e *fsm.Event) {
				o.applied(e, EventCancelled)
			},
		},
	)
	return o
}

// applied finishes a transition: the order gets its next version and the time passed to
// the transition's method (the event's first argument) and, for reject, its rejection
// (the second), then records an event of kind.
func (o *Order) applied(e *fsm.Event, kind EventKind) {
	o.version++
	if len(e.Args) >= 1 {
		if now, ok := e.Args[0].(time.Time); ok {
			o.updatedAt = now
		}
	}
	if len(e.Args) == 2 {
		if r, ok := e.Args[1].(*Rejection); ok {
			o.rejection = r.clone()
		}
	}
	o.events = append(o.events, Event{
		Kind: kind, OrderID: o.id, CustomerID: o.customerID, Lines: o.Lines(), Version: o.version,
		Rejection: o.rejection.clone(),
	})
}

// Place moves a draft order to placed at time now: the version grows by one and
// an order.order.placed.v1 event is recorded. It returns an error wrapping
// ErrNotDraft (and so ErrInvalidTransition) when the order is not a draft, in
// which case nothing changes.
func (o *Order) Place(now time.Time) error {
	return o.fire(transitionPlace, ErrNotDraft, dbTime(now))
}

// Cancel moves a draft, placed or confirmed order to cancelled at time now: the
// version grows by one and an order.order.cancelled.v1 event is recorded (stock
// releases what it holds for the order on it). It returns an error wrapping
// ErrAlreadyCancelled or ErrRejected (and so ErrInvalidTransition) when the order
// is cancelled or rejected, in which case nothing changes.
func (o *Order) Cancel(now time.Time) error {
	refused := ErrAlreadyCancelled
	if o.Status() == StatusRejected {
		refused = ErrRejected
	}
	return o.fire(transitionCancel, refused, dbTime(now))
}

// Confirm applies stock's confirmation of the placement at version answered
// (docs/architecture.md, rule 7): a placed order at that version moves to
// confirmed at time now, its version grows by one and an
// order.order.confirmed.v1 event is recorded. An answer for an order that has
// moved on (cancelled, answered already, or at another version) returns an error
// wrapping ErrAnswerOutdated and changes nothing.
func (o *Order) Confirm(answered int, now time.Time) error {
	if err := o.answers(answered); err != nil {
		return err
	}
	return o.fire(transitionConfirm, ErrAnswerOutdated, dbTime(now))
}

// Reject applies stock's rejection r of the placement at version answered, as
// Confirm does, moving the order to rejected, keeping r on it and recording an
// order.order.rejected.v1 event that carries r. It returns an error wrapping
// ErrInvalidRejection for a rejection without reason or short lines, and
// ErrAnswerOutdated as Confirm; nothing changes then.
func (o *Order) Reject(answered int, r Rejection, now time.Time) error {
	if r.Reason == "" || len(r.Lines) == 0 {
		return fmt.Errorf("reject order %s: %w", o.id, ErrInvalidRejection)
	}
	if err := o.answers(answered); err != nil {
		return err
	}
	return o.fire(transitionReject, ErrAnswerOutdated, dbTime(now), &r)
}

// answers returns an error wrapping ErrAnswerOutdated unless the order is still
// placed at version answered.
func (o *Order) answers(answered int) error {
	if !Answers(o.Status(), o.version, answered) {
		return fmt.Errorf("answer to order %s version %d, now %s at version %d: %w",
			o.id, answered, o.Status(), o.version, ErrAnswerOutdated)
	}
	return nil
}

// Answers reports whether stock's answer to the placement at version answered
// applies to an order at status and version: only while it is still placed at that
// version; otherwise Confirm and Reject return ErrAnswerOutdated.
func Answers(status Status, version, answered int) bool {
	return status == StatusPlaced && version == answered
}

func (o *Order) fire(transition string, refused error, args ...any) error {
	from := o.machine.Current()
	if o.machine.Cannot(transition) {
		return fmt.Errorf("%s order %s in status %s: %w", transition, o.id, from, refused)
	}
	// The state machine does no I/O; its context only reaches the callbacks above.
	if err := o.machine.Event(context.Background(), transition, args...); err != nil {
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

// Rejection returns why stock rejected the order, or nil unless it is rejected.
func (o *Order) Rejection() *Rejection { return o.rejection.clone() }

// clone is a deep copy of r; nil for nil.
func (r *Rejection) clone() *Rejection {
	if r == nil {
		return nil
	}
	return &Rejection{Reason: r.Reason, Lines: append([]ShortLine(nil), r.Lines...)}
}

// Events returns the events recorded by the transitions applied since the
// order was built, oldest first, in a fresh slice.
func (o *Order) Events() []Event { return append([]Event(nil), o.events...) }
