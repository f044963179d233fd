package e2e_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// TestForgedAnswerIsDeadLettered: while stock is stopped, an order waits placed;
// a well-formed stock.reservation.confirmed.v1 for it, published through
// app.events by a user who is not stock's relay (the administrator here: the
// broker refuses every other path, TestBrokerUsersAreLimited), is dead-lettered by
// order as unauthenticated, counted, and recorded with why; the order stays placed
// until stock's own answer, a rejection, arrives (docs/architecture.md, rule 8).
func TestForgedAnswerIsDeadLettered(t *testing.T) {
	t.Parallel()
	s := newShop(t, options{})
	ctx := testkit.Context(t)
	product := s.trackedProduct(ctx, "0.000")
	s.stop(s.sys.Stock)
	id := s.placeOrder(ctx, system.Line{ProductID: product, Quantity: "1.000"})
	placed := s.waitOrderStatus(ctx, id, "placed")

	env, err := contracts.NewEnvelope(contracts.EventStockReservationConfirmed, contracts.ProducerStock, "forged",
		contracts.StockReservationConfirmed{OrderID: uuid.MustParse(id), OrderVersion: placed.Version,
			Lines: []contracts.OrderLine{{ProductID: uuid.MustParse(product), Quantity: "1.000"}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := system.Publish(ctx, s.amqpURL, contracts.Exchange, env.EventName, env.EventID.String(), body); err != nil {
		t.Fatal(err)
	}
	unauthenticated := map[string]string{"consumer": contracts.ConsumerOrder, "reason": "unauthenticated"}
	eventually(t, "the forged answer counted as unauthenticated", func() string {
		if n, err := s.sys.OrderAPI.Metric(ctx, "inbox_failures_total", unauthenticated); err != nil || n != 1 {
			return "inbox_failures_total{reason=unauthenticated} not 1 yet"
		}
		return ""
	})
	var reason string
	eventually(t, "the forged answer's dead letter recorded", func() string {
		if err := s.dbs.Order.QueryRow(ctx, `SELECT reason FROM dead_letter WHERE message_key = $1`, env.EventID.String()).Scan(&reason); err != nil {
			return err.Error()
		}
		return ""
	})
	if !strings.Contains(reason, "unauthenticated") || !strings.Contains(reason, "stock-relay") {
		t.Errorf("dead letter reason %q; want it to name the user_id stock-relay it lacked", reason)
	}
	if o, _, err := s.api.Order(ctx, id); err != nil || o.Status != "placed" || o.Version != placed.Version {
		t.Fatalf("after the forged answer the order is %+v (%v); want placed v%d", o, err, placed.Version)
	}
	s.restart(ctx, s.sys.Stock)
	s.waitOrderStatus(ctx, id, "rejected")
}
