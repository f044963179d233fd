package auditor

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// order row and its transitions, each event about the order in every producer's
// outbox (the order's own, and the answers to it) with each receiving consumer's
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

// EventJourney is one outbox row of a producer and where it went.
type EventJourney struct {
	EventID      uuid.UUID  `json:"event_id"`
	EventName    string     `json:"event_name"`
	Producer     string     `json:"producer"`
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
	rows, err := eventsOfOrders(ctx, j.st, []store.Order{o}, j.now(), maxEventsPerOrder)
	if err != nil {
		return Journey{}, err
	}
	return j.build(ctx, o, rows)
}

// eventsOfOrders returns the events about orders in every producer's outbox, in id
// (time) order. The order's own producer wrote them between the orders' creation and
// last change; another producer's answers may follow the last change (an answer to an
// order cancelled meanwhile), so its range runs to now.
func eventsOfOrders(ctx context.Context, st *store.Store, orders []store.Order, now time.Time, limit int) ([]store.OutboxRow, error) {
	if len(orders) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(orders))
	from, until := orders[0].CreatedAt, orders[0].UpdatedAt
	for i, o := range orders {
		ids[i] = o.ID
		if o.CreatedAt.Before(from) {
			from = o.CreatedAt
		}
		if o.UpdatedAt.After(until) {
			until = o.UpdatedAt
		}
	}
	own := orderProducer()
	var out []store.OutboxRow
	for _, p := range contracts.Producers() {
		last := now
		if p.Name == own {
			last = until.Add(eventSlack)
		}
		rows, err := st.OutboxOfOrders(ctx, p.Name, ids, minID(from.Add(-eventSlack)), maxID(last), limit)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	slices.SortFunc(out, func(x, y store.OutboxRow) int { return compare(x.ID, y.ID) })
	return out, nil
}

// orderProducer names the producer of the order's own events, whose database holds
// the orders table.
func orderProducer() string {
	p, _ := contracts.ProducerOf(contracts.EventOrderPlaced)
	return p.Name
}

// Event returns the journey of the order of event id (of any producer), holding that
// event only, or an error wrapping ErrNotFound.
func (j *Journeys) Event(ctx context.Context, id uuid.UUID) (Journey, error) {
	var rows []store.OutboxRow
	for _, p := range contracts.Producers() {
		found, err := j.st.OutboxByIDs(ctx, p.Name, []uuid.UUID{id})
		if err != nil {
			return Journey{}, err
		}
		rows = append(rows, found...)
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
	own := orderProducer()
	for _, r := range rows {
		id := r.ID
		if r.Producer == own {
			jr.Transitions = append(jr.Transitions, Transition{To: statusOf(r.EventName), Version: r.OrderVersion, At: r.OccurredAt, EventID: &id})
		}
		jr.Events = append(jr.Events, EventJourney{
			EventID: r.ID, EventName: r.EventName, Producer: r.Producer, OrderVersion: r.OrderVersion, OccurredAt: r.OccurredAt,
			PublishedAt: r.PublishedAt, Attempts: r.Attempts, LastError: r.LastError, Deliveries: ds[r.ID],
		})
	}
	for _, c := range contracts.Consumers() {
		if c.Name == own {
			continue // it holds the order itself, not a copy
		}
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
	case contracts.EventOrderConfirmed:
		return "confirmed"
	case contracts.EventOrderRejected:
		return "rejected"
	}
	return eventName
}
