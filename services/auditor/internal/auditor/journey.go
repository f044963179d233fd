package auditor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
)

// ErrNotFound is returned for an order or event that does not exist.
var ErrNotFound = errors.New("not found")

// eventSlack widens the id range searched for an order's events around its creation
// and last change: the outbox row takes its time from the same request as the order's
// updated_at, a few milliseconds apart.
const eventSlack = 5 * time.Second

// maxEventsPerOrder bounds the events read for one order.
const maxEventsPerOrder = 100

// Journey is the path of one order, or one of its events, through every table: the
// order row and its transitions, each outbox event with each receiving consumer's
// state, and the copies of the order's state the consumers hold.
type Journey struct {
	Order       OrderView       `json:"order"`
	Transitions []Transition    `json:"transitions"`
	Events      []EventJourney  `json:"events"`
	StateCopies []StateCopyView `json:"state_copies"`
}

// OrderView is the order's current row.
type OrderView struct {
	ID        uuid.UUID `json:"id"`
	Status    string    `json:"status"`
	Version   int       `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Transition is one step of the order's state machine, with the version it made and
// the event written with it (none for the creation).
type Transition struct {
	To      string     `json:"to"`
	Version int        `json:"version"`
	At      time.Time  `json:"at"`
	EventID *uuid.UUID `json:"event_id,omitempty"`
}

// EventJourney is one outbox row and where it went.
type EventJourney struct {
	EventID      uuid.UUID  `json:"event_id"`
	EventName    string     `json:"event_name"`
	OrderVersion int        `json:"order_version"`
	OccurredAt   time.Time  `json:"occurred_at"`
	PublishedAt  *time.Time `json:"published_at"`
	Attempts     int        `json:"attempts"`
	LastError    string     `json:"last_error,omitempty"`
	Deliveries   []Delivery `json:"deliveries"`
}

// StateCopyView is what one consumer holds about the order.
type StateCopyView struct {
	Consumer string `json:"consumer"`
	Found    bool   `json:"found"`
	Status   string `json:"status,omitempty"`
	Version  int    `json:"version,omitempty"`
	Effect   string `json:"effect,omitempty"`
}

// Journeys builds journeys from the store.
type Journeys struct {
	st    *store.Store
	grace time.Duration
	now   func() time.Time
}

// NewJourneys returns a Journeys reading st; grace separates "in retry" from "missing".
func NewJourneys(st *store.Store, grace time.Duration) *Journeys {
	return &Journeys{st: st, grace: grace, now: time.Now}
}

// Order returns the journey of order id, or an error wrapping ErrNotFound.
func (j *Journeys) Order(ctx context.Context, id uuid.UUID) (Journey, error) {
	o, err := j.st.Order(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Journey{}, fmt.Errorf("order %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Journey{}, err
	}
	rows, err := j.st.OutboxOfOrders(ctx, []uuid.UUID{id}, minID(o.CreatedAt.Add(-eventSlack)), maxID(o.UpdatedAt.Add(eventSlack)), maxEventsPerOrder)
	if err != nil {
		return Journey{}, err
	}
	return j.build(ctx, o, rows)
}

// Event returns the journey of the order of event id, holding that event only, or an
// error wrapping ErrNotFound.
func (j *Journeys) Event(ctx context.Context, id uuid.UUID) (Journey, error) {
	rows, err := j.st.OutboxByIDs(ctx, []uuid.UUID{id})
	if err != nil {
		return Journey{}, err
	}
	if len(rows) == 0 {
		return Journey{}, fmt.Errorf("event %s: %w", id, ErrNotFound)
	}
	o, err := j.st.Order(ctx, rows[0].OrderID)
	if errors.Is(err, store.ErrNotFound) {
		return Journey{}, fmt.Errorf("order %s of event %s: %w", rows[0].OrderID, id, ErrNotFound)
	}
	if err != nil {
		return Journey{}, err
	}
	return j.build(ctx, o, rows)
}

func (j *Journeys) build(ctx context.Context, o store.Order, rows []store.OutboxRow) (Journey, error) {
	now := j.now()
	ds, err := deliveries(ctx, j.st, rows, now, j.grace)
	if err != nil {
		return Journey{}, err
	}
	jr := Journey{
		Order:       OrderView{ID: o.ID, Status: o.Status, Version: o.Version, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt},
		Transitions: []Transition{{To: "draft", Version: 1, At: o.CreatedAt}},
		Events:      make([]EventJourney, 0, len(rows)),
	}
	for _, r := range rows {
		id := r.ID
		jr.Transitions = append(jr.Transitions, Transition{To: statusOf(r.EventName), Version: r.OrderVersion, At: r.OccurredAt, EventID: &id})
		jr.Events = append(jr.Events, EventJourney{
			EventID: r.ID, EventName: r.EventName, OrderVersion: r.OrderVersion, OccurredAt: r.OccurredAt,
			PublishedAt: r.PublishedAt, Attempts: r.Attempts, LastError: r.LastError, Deliveries: ds[r.ID],
		})
	}
	for _, c := range contracts.Consumers() {
		copies, err := j.st.StateCopies(ctx, c.Name, []uuid.UUID{o.ID})
		if err != nil {
			return Journey{}, err
		}
		sc := copies[o.ID]
		jr.StateCopies = append(jr.StateCopies, StateCopyView{Consumer: c.Name, Found: sc.Found, Status: sc.Status, Version: sc.Version, Effect: sc.Effect})
	}
	return jr, nil
}

// statusOf names the order status an event records.
func statusOf(eventName string) string {
	switch eventName {
	case contracts.EventOrderPlaced:
		return "placed"
	case contracts.EventOrderCancelled:
		return "cancelled"
	}
	return eventName
}
