package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/order/internal/events"
	"example.com/shop/services/order/internal/order"
	"example.com/shop/services/order/internal/store"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

// saga is an order database with the order store and the inbox of stock's answers.
type saga struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	store *store.Store
	inbox *inbox.Inbox
	logs  *testkit.Logs
}

func newSaga(t *testing.T) *saga {
	t.Helper()
	pool, _ := testkit.NewDatabase(t, migrations.Schema)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool, outbox.NewWriter(v, contracts.ProducerOrder))
	logger, logs := testkit.Logger(t)
	ib := inbox.New(pool, events.Consumer, v, logger, nil)
	events.Register(ib, st.UpdateInTx, logger, nil)
	return &saga{t: t, ctx: testkit.Context(t), pool: pool, store: st, inbox: ib, logs: logs}
}

// placed creates an order and places it (version 2).
func (s *saga) placed() *order.Order {
	s.t.Helper()
	q, _ := order.ParseQuantity("3")
	o, err := order.New(uuid.New(), uuid.New(), []order.Line{{ProductID: uuid.New(), Quantity: q}}, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.store.Create(s.ctx, o); err != nil {
		s.t.Fatal(err)
	}
	if err := s.store.Update(s.ctx, o.ID(), func(o *order.Order) error { return o.Place(time.Now()) }); err != nil {
		s.t.Fatal(err)
	}
	return o
}

func (s *saga) cancel(id uuid.UUID) error {
	return s.store.Update(s.ctx, id, func(o *order.Order) error { return o.Cancel(time.Now()) })
}

// answer is stock's answer to order o placed at version: confirmed, or rejected with one
// short line.
func (s *saga) answer(o *order.Order, confirmed bool, version int) contracts.Envelope {
	s.t.Helper()
	line := o.Lines()[0]
	var name string
	var payload any
	if confirmed {
		name, payload = contracts.EventStockReservationConfirmed, contracts.StockReservationConfirmed{OrderID: o.ID(), OrderVersion: version,
			Lines: []contracts.OrderLine{{ProductID: line.ProductID, Quantity: line.Quantity.String()}}}
	} else {
		name, payload = contracts.EventStockReservationRejected, contracts.StockReservationRejected{OrderID: o.ID(), OrderVersion: version,
			Reason: contracts.RejectionInsufficientStock,
			Lines:  []contracts.ShortLine{{ProductID: line.ProductID, Requested: line.Quantity.String(), Available: "1.000"}}}
	}
	env, err := contracts.NewEnvelope(name, contracts.ProducerStock, o.ID().String(), payload, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return env
}

func (s *saga) process(env contracts.Envelope) (duplicate bool, err error) {
	return s.inbox.Process(s.ctx, env)
}

// events returns the names of the order's outbox rows, oldest first.
func (s *saga) events(id uuid.UUID) []string {
	s.t.Helper()
	rows, err := s.pool.Query(s.ctx, `SELECT event_name FROM outbox WHERE aggregate_key = $1 ORDER BY occurred_at, id`, id.String())
	if err != nil {
		s.t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			s.t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

func (s *saga) want(id uuid.UUID, status order.Status, version int, events ...string) *order.Order {
	s.t.Helper()
	o, err := s.store.Get(s.ctx, id)
	if err != nil {
		s.t.Fatal(err)
	}
	if o.Status() != status || o.Version() != version {
		s.t.Errorf("order %s = %s v%d, want %s v%d", id, o.Status(), o.Version(), status, version)
	}
	if got := s.events(id); len(got) != len(events) || (len(got) > 0 && got[len(got)-1] != events[len(events)-1]) {
		s.t.Errorf("order %s outbox = %v, want %v", id, got, events)
	}
	return o
}

const (
	placedEv    = contracts.EventOrderPlaced
	confirmedEv = contracts.EventOrderConfirmed
	rejectedEv  = contracts.EventOrderRejected
	cancelledEv = contracts.EventOrderCancelled
)

// Every interleaving of stock's answer and the order's cancel on the order's side ends
// right (docs/architecture.md, rule 7): an answer moves only the placement it answers, in
// one transaction with its own event and the answer's key; an answer that arrives after
// the cancel changes nothing and is logged as ignored, and the cancel's event (already
// written) is what releases stock's hold; a rejected order cannot be cancelled.
func TestEveryInterleavingOfAnswerAndCancel(t *testing.T) {
	t.Parallel()
	s := newSaga(t)

	t.Run("confirmed, then cancelled: the cancel releases the hold", func(t *testing.T) {
		o := s.placed()
		if _, err := s.process(s.answer(o, true, 2)); err != nil {
			t.Fatal(err)
		}
		s.want(o.ID(), order.StatusConfirmed, 3, placedEv, confirmedEv)
		if err := s.cancel(o.ID()); err != nil {
			t.Fatal(err)
		}
		s.want(o.ID(), order.StatusCancelled, 4, placedEv, confirmedEv, cancelledEv)
	})
	t.Run("cancelled, then confirmed: the answer is ignored", func(t *testing.T) {
		o := s.placed()
		if err := s.cancel(o.ID()); err != nil {
			t.Fatal(err)
		}
		if dup, err := s.process(s.answer(o, true, 2)); err != nil || dup {
			t.Fatalf("process = %v, %v; want applied as ignored", dup, err)
		}
		s.want(o.ID(), order.StatusCancelled, 3, placedEv, cancelledEv)
		if !strings.Contains(s.logs.String(), "stock answer ignored: the order has moved on from the placement it answers") {
			t.Error("an ignored answer is not logged")
		}
	})
	t.Run("rejected, then the cancel is refused", func(t *testing.T) {
		o := s.placed()
		if _, err := s.process(s.answer(o, false, 2)); err != nil {
			t.Fatal(err)
		}
		got := s.want(o.ID(), order.StatusRejected, 3, placedEv, rejectedEv)
		if r := got.Rejection(); r == nil || r.Reason != contracts.RejectionInsufficientStock || len(r.Lines) != 1 || r.Lines[0].Available != "1.000" {
			t.Errorf("rejection = %+v", r)
		}
		if err := s.cancel(o.ID()); !errors.Is(err, order.ErrRejected) {
			t.Errorf("cancel a rejected order: %v, want ErrRejected", err)
		}
		s.want(o.ID(), order.StatusRejected, 3, placedEv, rejectedEv)
	})
	t.Run("cancelled, then rejected: the answer is ignored", func(t *testing.T) {
		o := s.placed()
		if err := s.cancel(o.ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.process(s.answer(o, false, 2)); err != nil {
			t.Fatal(err)
		}
		if got := s.want(o.ID(), order.StatusCancelled, 3, placedEv, cancelledEv); got.Rejection() != nil {
			t.Errorf("an ignored rejection was kept: %+v", got.Rejection())
		}
	})
	t.Run("a duplicate and a second answer change nothing", func(t *testing.T) {
		o := s.placed()
		env := s.answer(o, true, 2)
		if _, err := s.process(env); err != nil {
			t.Fatal(err)
		}
		if dup, err := s.process(env); err != nil || !dup {
			t.Errorf("the same answer again: duplicate %v, %v; want a duplicate", dup, err)
		}
		if _, err := s.process(s.answer(o, false, 2)); err != nil {
			t.Fatal(err)
		}
		s.want(o.ID(), order.StatusConfirmed, 3, placedEv, confirmedEv)
	})
	t.Run("an answer to another version changes nothing", func(t *testing.T) {
		o := s.placed()
		if _, err := s.process(s.answer(o, true, 1)); err != nil {
			t.Fatal(err)
		}
		s.want(o.ID(), order.StatusPlaced, 2, placedEv)
	})
	t.Run("an answer to an unknown order is permanent", func(t *testing.T) {
		q, _ := order.ParseQuantity("1")
		ghost, err := order.New(uuid.New(), uuid.New(), []order.Line{{ProductID: uuid.New(), Quantity: q}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.process(s.answer(ghost, true, 2)); !inbox.Permanent(err) {
			t.Errorf("answer to an unknown order: %v, want a permanent error", err)
		}
	})
}

// A cancel and an answer handled at the same moment take turns on the order's row lock,
// and whichever goes first, the order ends cancelled after a confirmation (the cancel
// comes second and releases the hold, or comes first and the answer is ignored), or
// rejected with the cancel refused; never confirmed after a cancel.
func TestConcurrentAnswerAndCancel(t *testing.T) {
	t.Parallel()
	s := newSaga(t)
	for n := range 20 {
		confirmed := n%2 == 0
		o := s.placed()
		var wg sync.WaitGroup
		var cancelErr, answerErr error
		wg.Go(func() { cancelErr = s.cancel(o.ID()) })
		wg.Go(func() { _, answerErr = s.process(s.answer(o, confirmed, 2)) })
		wg.Wait()
		if answerErr != nil {
			t.Fatalf("answer: %v", answerErr)
		}
		got, err := s.store.Get(s.ctx, o.ID())
		if err != nil {
			t.Fatal(err)
		}
		names := s.events(o.ID())
		switch {
		case got.Status() == order.StatusCancelled && cancelErr == nil:
			if last := names[len(names)-1]; last != cancelledEv {
				t.Errorf("cancelled order's events %v do not end with its cancel", names)
			}
		case !confirmed && got.Status() == order.StatusRejected && errors.Is(cancelErr, order.ErrRejected):
		default:
			t.Errorf("order %d (confirmed answer %v): %s v%d, cancel %v, events %v", n, confirmed, got.Status(), got.Version(), cancelErr, names)
		}
	}
}

// The rejection is stored in the contract's form.
func TestRejectionIsStored(t *testing.T) {
	t.Parallel()
	s := newSaga(t)
	o := s.placed()
	if _, err := s.process(s.answer(o, false, 2)); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := s.pool.QueryRow(s.ctx, `SELECT rejection FROM orders WHERE id = $1`, o.ID()).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var r contracts.Rejection
	if err := json.Unmarshal(raw, &r); err != nil || r.Reason != contracts.RejectionInsufficientStock || len(r.Lines) != 1 ||
		r.Lines[0].Requested != "3.000" {
		t.Errorf("stored rejection %s (%v)", raw, err)
	}
}
