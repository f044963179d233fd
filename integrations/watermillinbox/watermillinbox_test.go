package watermillinbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"example.com/shop/integrations/watermillinbox"
	"example.com/shop/platform/inbox"
	"example.com/shop/testkit"
)

// TestRedeliveryOverRabbitMQ runs the middleware on watermill-amqp against the
// real broker, in a vhost of its own. Message A is processed, then its ack is
// lost (a middleware outside the inbox fails after the commit), so RabbitMQ
// delivers it again: the handler is not called, the copy is acknowledged.
// Message B's handler fails once after writing: its key rolls back with the
// write, the broker delivers it again, and it is processed.
func TestRedeliveryOverRabbitMQ(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := amqp.NewDurableQueueConfig(testkit.NewVhost(t))
	logger := watermill.NopLogger{}
	pub, err := amqp.NewPublisher(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := amqp.NewSubscriber(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}

	a, b := uuid.NewString(), uuid.NewString()
	user, handler := "u-"+uuid.NewString(), "billing-"+uuid.NewString()
	type delivery struct {
		id  string
		err error
	}
	deliveries := make(chan delivery, 16)
	var mu sync.Mutex
	lostAck, failed := false, false
	calls := map[string]int{}

	// Outside the inbox: loses A's first ack after its commit.
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			msgs, err := h(msg)
			mu.Lock()
			if msg.UUID == a && err == nil && !lostAck {
				lostAck, err = true, errors.New("ack lost")
			}
			mu.Unlock()
			deliveries <- delivery{msg.UUID, err}
			return msgs, err
		}
	})
	reg := prometheus.NewRegistry()
	router.AddMiddleware(watermillinbox.Middleware(watermillinbox.Config[inbox.DB, pgx.Tx]{
		Store: inbox.PostgresStore{}, DB: db, Registerer: reg,
	}))
	queue := "payments-" + uuid.NewString()
	router.AddConsumerHandler(handler, queue, closedLater{sub}, func(msg *message.Message) error {
		tx := watermillinbox.Tx[pgx.Tx](msg)
		if _, err := tx.Exec(msg.Context(), `INSERT INTO wallet (user_id, cashback) VALUES ($1, 1.90)
ON CONFLICT (user_id) DO UPDATE SET cashback = wallet.cashback + 1.90`, user); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		calls[msg.UUID]++
		if msg.UUID == b && !failed {
			failed = true
			return errors.New("provider timed out")
		}
		return nil
	})
	// watermill-amqp v3.0.2 races with itself when a subscriber is closed while
	// its consume loop still runs (its connection's close handler replaces a
	// channel the loop reads): the router stops the loop through its context, and
	// the subscriber is closed after Run returned.
	runCtx, stop := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- router.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-runDone
		_ = sub.Close()
	})
	select {
	case <-router.Running():
	case <-ctx.Done():
		t.Fatal("the router did not start")
	}

	for _, id := range []string{a, b} {
		msg := message.NewMessage(id, []byte(`{"cashback":"1.90"}`))
		if err := pub.Publish(queue, msg); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	got := map[string][]error{}
	for range 4 { // A, A redelivered, B failing, B redelivered
		select {
		case d := <-deliveries:
			got[d.id] = append(got[d.id], d.err)
		case <-ctx.Done():
			t.Fatalf("deliveries so far: %v", got)
		}
	}
	if len(got[a]) != 2 || got[a][0] == nil || got[a][1] != nil {
		t.Errorf("A: deliveries ended with %v; want the lost ack, then an acknowledged copy", got[a])
	}
	if len(got[b]) != 2 || got[b][0] == nil || got[b][1] != nil {
		t.Errorf("B: deliveries ended with %v; want the handler's error, then processed", got[b])
	}
	mu.Lock()
	if calls[a] != 1 || calls[b] != 2 {
		t.Errorf("handler calls A = %d, B = %d; want 1 (the copy skipped), 2 (failed, then processed)", calls[a], calls[b])
	}
	mu.Unlock()
	if w := wallet(ctx, user); w != "3.80" {
		t.Errorf("wallet = %s, want 3.80 (A once, B once: its failed write rolled back)", w)
	}
	var keys int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE consumer = $1 AND message_key IN ($2, $3)`, handler, a, b).Scan(&keys); err != nil || keys != 2 {
		t.Errorf("keys of the handler = %d (%v), want 2 (the message UUIDs)", keys, err)
	}
	want := fmt.Sprintf(`
# HELP inbox_duplicates_total Messages not applied because their key was already in processed_event, per consumer.
# TYPE inbox_duplicates_total counter
inbox_duplicates_total{consumer=%[1]q} 1
# HELP inbox_processed_total Messages whose effect ran and committed, per consumer.
# TYPE inbox_processed_total counter
inbox_processed_total{consumer=%[1]q} 2
`, handler)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "inbox_processed_total", "inbox_duplicates_total"); err != nil {
		t.Error(err)
	}
}

// closedLater is a subscriber whose Close is left to the test.
type closedLater struct{ message.Subscriber }

func (closedLater) Close() error { return nil }

func TestKey(t *testing.T) {
	for _, c := range []struct {
		name     string
		metadata map[string]string
		uuid     string
		want     string
	}{
		{"CloudEvents on AMQP", map[string]string{"cloudEvents_id": "e-1", "cloudEvents_source": "/orders"}, "u-1", "/orders e-1"},
		{"CloudEvents on Kafka", map[string]string{"ce_id": "e-2", "ce_source": "/orders"}, "u-2", "/orders e-2"},
		{"the UUID", map[string]string{"other": "x"}, "u-3", "u-3"},
	} {
		msg := message.NewMessage(c.uuid, nil)
		for k, v := range c.metadata {
			msg.Metadata.Set(k, v)
		}
		if got, err := watermillinbox.Key(msg); err != nil || got != c.want {
			t.Errorf("%s: Key = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	if _, err := watermillinbox.Key(message.NewMessage("", nil)); !errors.Is(err, inbox.ErrNoKey) {
		t.Errorf("no key: err = %v, want ErrNoKey", err)
	}
}
