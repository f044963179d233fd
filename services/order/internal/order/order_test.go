package order_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/services/order/internal/order"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 678_901_234, time.UTC)

func qty(t *testing.T, s string) order.Quantity {
	t.Helper()
	q, err := order.ParseQuantity(s)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func newDraft(t *testing.T) *order.Order {
	t.Helper()
	o, err := order.New(uuid.New(), uuid.New(), []order.Line{
		{ProductID: uuid.New(), Quantity: qty(t, "2")},
		{ProductID: uuid.New(), Quantity: qty(t, "0.5")},
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestNewIsDraftAtVersionOne(t *testing.T) {
	t.Parallel()
	o := newDraft(t)
	if o.Status() != order.StatusDraft || o.Version() != 1 {
		t.Fatalf("new order = %s v%d, want draft v1", o.Status(), o.Version())
	}
	if !o.CreatedAt().Equal(t0.Truncate(time.Microsecond)) || !o.UpdatedAt().Equal(o.CreatedAt()) {
		t.Errorf("timestamps = %s, %s", o.CreatedAt(), o.UpdatedAt())
	}
	if len(o.Events()) != 0 {
		t.Errorf("new order recorded %d events", len(o.Events()))
	}
	if got := o.Lines()[0].Quantity.String(); got != "2.000" {
		t.Errorf("quantity = %q, want 2.000", got)
	}
}

func TestPlaceRecordsPlacedEvent(t *testing.T) {
	t.Parallel()
	o := newDraft(t)
	later := t0.Add(time.Minute)
	if err := o.Place(later); err != nil {
		t.Fatalf("Place: %v", err)
	}
	if o.Status() != order.StatusPlaced || o.Version() != 2 || !o.UpdatedAt().Equal(later.Truncate(time.Microsecond)) {
		t.Fatalf("after place = %s v%d at %s", o.Status(), o.Version(), o.UpdatedAt())
	}
	events := o.Events()
	if len(events) != 1 || events[0].Kind != order.EventPlaced {
		t.Fatalf("events = %+v, want one %s", events, order.EventPlaced)
	}
	p := events[0]
	if p.OrderID != o.ID() || p.CustomerID != o.CustomerID() || p.Version != 2 ||
		len(p.Lines) != 2 || p.Lines[0].Quantity.String() != "2.000" || p.Lines[1].Quantity.String() != "0.500" {
		t.Errorf("event = %+v", p)
	}
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	type step struct {
		action  string
		wantErr error
		status  order.Status
		version int
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"place then cancel", []step{
			{"place", nil, order.StatusPlaced, 2},
			{"cancel", nil, order.StatusCancelled, 3},
		}},
		{"cancel a draft", []step{{"cancel", nil, order.StatusCancelled, 2}}},
		{"place twice", []step{
			{"place", nil, order.StatusPlaced, 2},
			{"place", order.ErrNotDraft, order.StatusPlaced, 2},
		}},
		{"cancel twice", []step{
			{"cancel", nil, order.StatusCancelled, 2},
			{"cancel", order.ErrAlreadyCancelled, order.StatusCancelled, 2},
		}},
		{"place a cancelled order", []step{
			{"cancel", nil, order.StatusCancelled, 2},
			{"place", order.ErrNotDraft, order.StatusCancelled, 2},
		}},
		{"confirm then cancel", []step{
			{"place", nil, order.StatusPlaced, 2},
			{"confirm2", nil, order.StatusConfirmed, 3},
			{"cancel", nil, order.StatusCancelled, 4},
		}},
		{"reject, then cancel is refused", []step{
			{"place", nil, order.StatusPlaced, 2},
			{"reject2", nil, order.StatusRejected, 3},
			{"cancel", order.ErrRejected, order.StatusRejected, 3},
			{"confirm2", order.ErrAnswerOutdated, order.StatusRejected, 3},
		}},
		{"an answer after the cancel changes nothing", []step{
			{"place", nil, order.StatusPlaced, 2},
			{"cancel", nil, order.StatusCancelled, 3},
			{"confirm2", order.ErrAnswerOutdated, order.StatusCancelled, 3},
			{"reject2", order.ErrAnswerOutdated, order.StatusCancelled, 3},
		}},
		{"a second answer changes nothing", []step{
			{"place", nil, order.StatusPlaced, 2},
			{"confirm2", nil, order.StatusConfirmed, 3},
			{"confirm2", order.ErrAnswerOutdated, order.StatusConfirmed, 3},
			{"reject2", order.ErrAnswerOutdated, order.StatusConfirmed, 3},
		}},
		{"an answer to another version changes nothing", []step{
			{"place", nil, order.StatusPlaced, 2},
			{"confirm1", order.ErrAnswerOutdated, order.StatusPlaced, 2},
		}},
		{"an answer to a draft changes nothing", []step{
			{"confirm1", order.ErrAnswerOutdated, order.StatusDraft, 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newDraft(t)
			applied := 0
			for i, s := range tc.steps {
				var err error
				switch s.action {
				case "place":
					err = o.Place(t0)
				case "cancel":
					err = o.Cancel(t0)
				case "confirm1", "confirm2":
					err = o.Confirm(int(s.action[7]-'0'), t0)
				case "reject2":
					err = o.Reject(2, sampleRejection(), t0)
				}
				if !errors.Is(err, s.wantErr) {
					t.Fatalf("step %d %s: err = %v, want %v", i, s.action, err, s.wantErr)
				}
				if s.wantErr != nil && !errors.Is(err, order.ErrInvalidTransition) {
					t.Fatalf("step %d: %v does not wrap ErrInvalidTransition", i, err)
				}
				if s.wantErr == nil {
					applied++
				}
				if o.Status() != s.status || o.Version() != s.version {
					t.Fatalf("step %d %s: %s v%d, want %s v%d", i, s.action, o.Status(), o.Version(), s.status, s.version)
				}
			}
			if n := len(o.Events()); n != applied {
				t.Fatalf("events = %d, want one per applied transition (%d)", n, applied)
			}
		})
	}
}

func TestCancelRecordsCancelledEventWithVersion(t *testing.T) {
	t.Parallel()
	o := newDraft(t)
	if err := o.Place(t0); err != nil {
		t.Fatal(err)
	}
	if err := o.Cancel(t0); err != nil {
		t.Fatal(err)
	}
	events := o.Events()
	if len(events) != 2 || events[1].Kind != order.EventCancelled || events[1].Version != 3 {
		t.Fatalf("events = %+v, want placed v2 then cancelled v3", events)
	}
}

func TestFromDatabaseRecordsNoEvent(t *testing.T) {
	t.Parallel()
	lines := []order.Line{{ProductID: uuid.New(), Quantity: qty(t, "1")}}
	o, err := order.FromDatabase(uuid.New(), uuid.New(), order.StatusPlaced, 2, lines, t0, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status() != order.StatusPlaced || o.Version() != 2 || len(o.Events()) != 0 {
		t.Fatalf("rebuilt = %s v%d, %d events", o.Status(), o.Version(), len(o.Events()))
	}
	if err := o.Place(t0); !errors.Is(err, order.ErrNotDraft) {
		t.Fatalf("Place on a stored placed order: %v", err)
	}
	if err := o.Cancel(t0); err != nil || o.Version() != 3 {
		t.Fatalf("Cancel: %v, version %d", err, o.Version())
	}

	if _, err := order.FromDatabase(uuid.New(), uuid.New(), "shipped", 1, lines, t0, t0, nil); err == nil {
		t.Error("unknown status accepted")
	}
	if _, err := order.FromDatabase(uuid.New(), uuid.New(), order.StatusDraft, 0, lines, t0, t0, nil); err == nil {
		t.Error("version 0 accepted")
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	p1, p2 := uuid.New(), uuid.New()
	one := qty(t, "1")
	many := make([]order.Line, order.MaxLines+1)
	for i := range many {
		many[i] = order.Line{ProductID: uuid.New(), Quantity: one}
	}
	cases := []struct {
		name      string
		customer  uuid.UUID
		lines     []order.Line
		wantField string
		wantErr   error
	}{
		{"nil customer", uuid.Nil, []order.Line{{p1, one}}, "customer_id", order.ErrRequired},
		{"no lines", uuid.New(), nil, "lines", order.ErrNoLines},
		{"too many lines", uuid.New(), many, "lines", order.ErrTooManyLines},
		{"nil product", uuid.New(), []order.Line{{p1, one}, {uuid.Nil, one}}, "lines[1].product_id", order.ErrRequired},
		{"zero quantity value", uuid.New(), []order.Line{{p1, order.Quantity{}}}, "lines[0].quantity", order.ErrInvalidQuantity},
		{"duplicate product", uuid.New(), []order.Line{{p1, one}, {p2, one}, {p1, one}}, "lines[2].product_id", order.ErrDuplicateProduct},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := order.New(uuid.New(), tc.customer, tc.lines, t0)
			var fe *order.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.wantField || !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want field %s wrapping %v", err, tc.wantField, tc.wantErr)
			}
		})
	}
}

func TestParseQuantity(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"2":             "2.000",
		"2.5":           "2.500",
		"0.001":         "0.001",
		"0.5":           "0.500",
		"007.25":        "7.250",
		"999999999.999": "999999999.999",
		"000000001":     "1.000",
		"10":            "10.000",
	}
	for in, want := range good {
		q, err := order.ParseQuantity(in)
		if err != nil || q.String() != want {
			t.Errorf("ParseQuantity(%q) = %q, %v; want %q", in, q, err, want)
		}
	}
	bad := []string{
		"", "0", "0.000", "00.0", "-1", "+1", "1e3", "1.2345", "1000000000", "1.", ".5",
		" 1", "1 ", "1,5", "abc", "NaN", "١", "1.0.0", "0x10", "99999999999999999999999999999999999",
	}
	for _, in := range bad {
		if q, err := order.ParseQuantity(in); !errors.Is(err, order.ErrInvalidQuantity) {
			t.Errorf("ParseQuantity(%q) = %q, %v; want ErrInvalidQuantity", in, q, err)
		}
	}
}

func sampleRejection() order.Rejection {
	q, _ := order.ParseQuantity("3")
	return order.Rejection{Reason: "insufficient_stock", Lines: []order.ShortLine{{ProductID: uuid.New(), Requested: q, Available: "1.000"}}}
}

// Reject keeps the rejection on the order and in its event; a rejection without a reason
// or short lines is refused; FromDatabase keeps a rejection only on a rejected order.
func TestRejectKeepsTheRejection(t *testing.T) {
	t.Parallel()
	o := newDraft(t)
	if err := o.Place(t0); err != nil {
		t.Fatal(err)
	}
	if err := o.Reject(2, order.Rejection{Reason: "insufficient_stock"}, t0); !errors.Is(err, order.ErrInvalidRejection) {
		t.Fatalf("a rejection without lines: %v, want ErrInvalidRejection", err)
	}
	r := sampleRejection()
	if err := o.Reject(2, r, t0); err != nil {
		t.Fatal(err)
	}
	r.Lines[0].Available = "changed by the caller"
	got := o.Rejection()
	if got == nil || got.Reason != "insufficient_stock" || len(got.Lines) != 1 || got.Lines[0].Available != "1.000" {
		t.Fatalf("Rejection() = %+v", got)
	}
	events := o.Events()
	if e := events[len(events)-1]; e.Kind != order.EventRejected || e.Version != 3 || e.Rejection == nil || e.Rejection.Lines[0].Available != "1.000" {
		t.Errorf("event = %+v, want rejected v3 with the rejection", e)
	}
	if c := newDraft(t); c.Rejection() != nil {
		t.Error("a draft has a rejection")
	}
	if _, err := order.FromDatabase(uuid.New(), uuid.New(), order.StatusRejected, 3, o.Lines(), t0, t0, nil); err == nil {
		t.Error("FromDatabase: a rejected order without its rejection is accepted")
	}
	if _, err := order.FromDatabase(uuid.New(), uuid.New(), order.StatusConfirmed, 3, o.Lines(), t0, t0, got); err == nil {
		t.Error("FromDatabase: a confirmed order with a rejection is accepted")
	}
	back, err := order.FromDatabase(uuid.New(), uuid.New(), order.StatusRejected, 3, o.Lines(), t0, t0, got)
	if err != nil || back.Rejection().Reason != "insufficient_stock" {
		t.Errorf("FromDatabase of a rejected order = %v, %v", back, err)
	}
}
