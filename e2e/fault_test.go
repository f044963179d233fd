//go:build drills

package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/fault"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// TestFaultBroker raises faults in the rig's own vhost of the shared broker,
// one after the other: a queue refusing publishes, deleted queues, a deleted
// exchange, and messages with a wrong content type, message id or type (last, as
// they stay in the dead-letter queues).
func TestFaultBroker(t *testing.T) {
	t.Parallel()
	r := newRig(t, sharedVhost(t), nil)
	var st steps
	st.run(t, r, "reject-publish", rejectPublish)
	st.run(t, r, "deleted-queue/"+contracts.QueueStock, deletedQueue(contracts.QueueStock))
	st.run(t, r, "deleted-queue/"+contracts.QueueShipping, deletedQueue(contracts.QueueShipping))
	st.run(t, r, "deleted-exchange", deletedExchange)
	st.run(t, r, "bad-content", badContent)
}

// TestFaultBrokerNode raises node-wide faults on a private RabbitMQ node.
func TestFaultBrokerNode(t *testing.T) {
	t.Parallel()
	node := privateNode(t)
	r := newRig(t, nodeVhost(t, node), nil)
	var st steps
	st.run(t, r, "memory-alarm", memoryAlarm(node))
	st.run(t, r, "stop-start-app", stopStartApp(node))
}

// TestFaultDatabase takes the databases away in turn: each consumer's for
// longer than its retry budget, the order database, every session, and the
// order database's listener.
func TestFaultDatabase(t *testing.T) {
	t.Parallel()
	r := newRig(t, sharedVhost(t), nil)
	var st steps
	st.run(t, r, "outage/stock", databaseOutage("stock"))
	st.run(t, r, "outage/shipping", databaseOutage("shipping"))
	st.run(t, r, "outage/order", orderDatabaseOutage)
	st.run(t, r, "terminated-backends", terminatedBackends)
	st.run(t, r, "paused-listener", pausedListener)
	st.run(t, r, "paused-consumer-database", pausedConsumerDatabase)
}

// TestFaultSignals freezes the leading relay, then sends SIGKILL, SIGSTOP and
// SIGTERM to every process in a random order (seed logged).
func TestFaultSignals(t *testing.T) {
	t.Parallel()
	r := newRig(t, sharedVhost(t), nil)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var st steps
	st.run(t, r, "frozen-leader", frozenLeader)
	for _, sig := range []string{"SIGKILL", "SIGSTOP", "SIGTERM"} {
		st.run(t, r, sig, signals(sig, seed))
	}
}

// TestFaultNetwork cuts, slows and stalls the connection of each process to
// PostgreSQL or RabbitMQ through its Toxiproxy proxy while orders are placed,
// one fault after the other on one running system; after each, every
// process is ready again by itself and the ledger is whole.
func TestFaultNetwork(t *testing.T) {
	t.Parallel()
	r := newRig(t, sharedVhost(t), nil)
	hold := 4 * time.Second
	toxic := func(kind string, attrs map[string]any) func(*testing.T, string) {
		return func(t *testing.T, proxy string) {
			remove, err := r.Net.Toxic(proxy, kind, attrs)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(hold)
			remove()
		}
	}
	cut := func(t *testing.T, proxy string) {
		if err := r.Net.Disable(proxy); err != nil {
			t.Fatal(err)
		}
		time.Sleep(hold)
		if err := r.Net.Enable(proxy); err != nil {
			t.Fatal(err)
		}
	}
	faults := []struct {
		proxy, name string
		apply       func(*testing.T, string)
	}{
		{"order-relay-amqp", "timeout", toxic("timeout", map[string]any{"timeout": 0})},
		{"order-relay-pg", "reset_peer", toxic("reset_peer", map[string]any{"timeout": 0})},
		{"order-relay-amqp", "latency", toxic("latency", map[string]any{"latency": 1500, "jitter": 500})},
		{"order-relay-pg", "bandwidth0", toxic("bandwidth", map[string]any{"rate": 0})},
		{"stock-amqp", "cut", cut},
		{"stock-pg", "latency", toxic("latency", map[string]any{"latency": 500, "jitter": 200})},
		{"stock-pg", "reset_peer", toxic("reset_peer", map[string]any{"timeout": 0})},
		{"shipping-amqp", "bandwidth0", toxic("bandwidth", map[string]any{"rate": 0})},
		{"shipping-pg", "timeout", toxic("timeout", map[string]any{"timeout": 0})},
		{"shipping-amqp", "reset_peer", toxic("reset_peer", map[string]any{"timeout": 0})},
		{"order-pg", "latency", toxic("latency", map[string]any{"latency": 300})},
		{"order-pg", "cut", cut},
		{"standby-pg", "cut", cut},
		{"standby-amqp", "timeout", toxic("timeout", map[string]any{"timeout": 0})},
		{"stock-relay-amqp", "cut", cut},
		{"stock-relay-pg", "reset_peer", toxic("reset_peer", map[string]any{"timeout": 0})},
		{"order-amqp", "cut", cut},
	}
	var st steps
	for _, f := range faults {
		st.run(t, r, f.proxy+"/"+f.name, func(t *testing.T, r *fault.Rig) {
			underLoad(t, r, 15, 15, func(context.Context) { f.apply(t, f.proxy) })
			ledger(t, r, nil)
		})
	}
}

// rejectPublish makes stock.events refuse publishes for a while:
// stock stalls (SIGSTOP) behind a max-length 1 + reject-publish policy, so
// the broker nacks every event for it. The relay retries the refused row
// alone with backoff, so the healthy shipping.events sees a few duplicates,
// not a storm of whole batches, and nothing is lost once
// the policy is cleared and stock goes on.
func rejectPublish(t *testing.T, r *fault.Rig) {
	ctx := testkit.Context(t)
	before, err := r.Sys.Shipping.Metric(ctx, "inbox_duplicates_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	var during int
	underLoad(t, r, 20, 20, func(ctx context.Context) {
		if _, err := r.Ctl(ctx, true, "set_policy", "refuse-stock", `^stock\.events$`, `{"max-length":1,"overflow":"reject-publish"}`, "--apply-to", "queues"); err != nil {
			t.Fatal(err)
		}
		from := r.Placed()
		if err := r.Freeze(ctx, r.Sys.Stock, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		during = r.Placed() - from
		if _, err := r.Ctl(ctx, true, "clear_policy", "refuse-stock"); err != nil {
			t.Fatal(err)
		}
	})
	ledger(t, r, nil)
	after, err := r.Sys.Shipping.Metric(ctx, "inbox_duplicates_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	sh := after - before
	t.Logf("shipping saw %v duplicates for %d orders placed while stock.events refused publishes", sh, during)
	// A bound on copies, not on time: every refused row may come again a
	// handful of times; re-sending whole batches multiplies the copies by
	// the batch size.
	if limit := 2*during + 50; int(sh) > limit {
		t.Errorf("shipping.events received %v duplicates for %d events (limit %d): the relay re-sends whole batches", sh, during, limit)
	}
}

// deletedQueue deletes stock.events (and later shipping.events)
// while the system runs: the consumer declares its queue again at once, and
// every event published once it consumes again reaches it. Deleting a
// queue deletes its messages, so the load is paused while the queue is
// drained and gone.
func deletedQueue(q string) func(t *testing.T, r *fault.Rig) {
	return func(t *testing.T, r *fault.Rig) {
		ctx := testkit.Context(t)
		underLoad(t, r, 20, 0, func(context.Context) {})
		ledger(t, r, nil) // drained
		if err := r.Broker(ctx, func(ch *amqp091.Channel) error {
			_, err := ch.QueueDelete(q, false, false, false)
			return err
		}); err != nil {
			t.Fatalf("delete %s: %v", q, err)
		}
		// A consumer on the queue again means its consumer finished a whole
		// declaration, bindings included; the queue alone may be a declaration
		// still binding it (the consumer's or a relay's), which events skip.
		eventually(t, q+" declared and consumed again", func() string {
			var consumers int
			err := r.Broker(ctx, func(ch *amqp091.Channel) error {
				info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
				consumers = info.Consumers
				return err
			})
			if err != nil {
				return err.Error()
			}
			if consumers == 0 {
				return "no consumer yet"
			}
			return ""
		})
		underLoad(t, r, 0, 40, func(context.Context) {})
		ledger(t, r, nil)
	}
}

// deletedExchange deletes app.events under load: a relay's publish fails
// and it declares the topology again and publishes the failed batch, or
// another process declares the exchange first; each process binds its part
// again within AMQP_REDECLARE_INTERVAL. Until every binding is back an event
// can reach no queue (it goes to app.events.unroutable) or only some of its
// consumers: the window docs/architecture.md ("Who declares what") leaves to
// replay-outbox, which the test runs over it. Then nothing is lost.
func deletedExchange(t *testing.T, r *fault.Rig) {
	var deleted time.Time
	underLoad(t, r, 20, 40, func(ctx context.Context) {
		deleted = time.Now()
		if err := r.Broker(ctx, func(ch *amqp091.Channel) error {
			return ch.ExchangeDelete(contracts.Exchange, false, false)
		}); err != nil {
			t.Fatalf("delete %s: %v", contracts.Exchange, err)
		}
	})
	until := deleted.Add(15 * time.Second) // three redeclare intervals
	time.Sleep(time.Until(until))
	out, err := r.ReplayOutbox(testkit.Context(t), deleted.Add(-time.Second), until)
	t.Logf("replay-outbox over the window:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	ledger(t, r, nil)
}

// badContent publishes a valid envelope with content_type text/plain, one
// whose message_id is not its event_id, and one whose type is not its
// event_name: each consumer dead-letters all three and no order is touched by
// them.
func badContent(t *testing.T, r *fault.Rig) {
	ctx := testkit.Context(t)
	underLoad(t, r, 10, 0, func(context.Context) {})
	ledger(t, r, nil)

	var name, body string
	if err := r.DBs.Order.QueryRow(ctx, `SELECT event_name, envelope::text FROM outbox WHERE event_name = $1 LIMIT 1`,
		contracts.EventOrderPlaced).Scan(&name, &body); err != nil {
		t.Fatal(err)
	}
	withID := func(id string) []byte {
		var env map[string]any
		if err := json.Unmarshal([]byte(body), &env); err != nil {
			t.Fatal(err)
		}
		env["event_id"] = id
		b, _ := json.Marshal(env)
		return b
	}
	// The same order's event under new ids: accepted, it would reserve the
	// order's lines a second time.
	textID := newEventID()
	if err := r.Broker(ctx, func(ch *amqp091.Channel) error {
		return ch.PublishWithContext(ctx, contracts.Exchange, name, false, false, amqp091.Publishing{
			ContentType: "text/plain", DeliveryMode: amqp091.Persistent, MessageId: textID, Type: name, Body: withID(textID),
		})
	}); err != nil {
		t.Fatal(err)
	}
	if err := system.Publish(ctx, r.AMQPURL(), contracts.Exchange, name, newEventID(), withID(newEventID())); err != nil {
		t.Fatal(err)
	}
	typeID := newEventID() // routed as a placed event, typed as a cancel
	if err := r.Broker(ctx, func(ch *amqp091.Channel) error {
		return ch.PublishWithContext(ctx, contracts.Exchange, name, false, false, amqp091.Publishing{
			ContentType: "application/json", DeliveryMode: amqp091.Persistent, MessageId: typeID,
			Type: contracts.EventOrderCancelled, Body: withID(typeID),
		})
	}); err != nil {
		t.Fatal(err)
	}
	ledger(t, r, map[string]int{contracts.QueueStockDLQ: 3, contracts.QueueShippingDLQ: 3})
}

// newEventID returns a fresh event id of the envelope's kind (UUIDv7).
func newEventID() string { return uuid.Must(uuid.NewV7()).String() }

// databaseOutage makes each consumer's database refuse connections
// (ALLOW_CONNECTIONS false, every session terminated) for longer than its
// whole retry budget while events keep coming: the consumer stops taking
// deliveries until its database is back and dead-letters nothing.
func databaseOutage(db string) func(t *testing.T, r *fault.Rig) {
	return func(t *testing.T, r *fault.Rig) {
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			unblock, err := r.BlockDatabase(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			from := r.Placed()
			time.Sleep(15 * time.Second)
			if err := unblock(context.WithoutCancel(ctx)); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d orders placed while the %s database was down", r.Placed()-from, db)
		})
		ledger(t, r, nil)
	}
}

// orderDatabaseOutage blocks the order database: the order API answers 503
// with Retry-After (never 500) until it is back; the relays wait; nothing
// placed is lost.
func orderDatabaseOutage(t *testing.T, r *fault.Rig) {
	underLoad(t, r, 20, 20, func(ctx context.Context) {
		unblock, err := r.BlockDatabase(ctx, "order")
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := unblock(context.WithoutCancel(ctx)); err != nil {
				t.Fatal(err)
			}
		}()
		seen := map[int]int{}
		var retryAfter string
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			st, ra, err := postOrder(ctx, r.Sys.OrderAPI.Addr)
			if err == nil {
				seen[st]++
				if st == http.StatusServiceUnavailable {
					retryAfter = ra
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("order API statuses during the outage: %v (Retry-After %q)", seen, retryAfter)
		if seen[http.StatusInternalServerError] > 0 || seen[http.StatusServiceUnavailable] == 0 || retryAfter == "" {
			t.Errorf("order API during a database outage answered %v (Retry-After %q); want 503 with Retry-After, never 500", seen, retryAfter)
		}
	})
	ledger(t, r, nil)
}

// postOrder posts one draft order and returns the status and Retry-After.
func postOrder(ctx context.Context, addr string) (int, string, error) {
	body := fmt.Sprintf(`{"customer_id":%q,"lines":[{"product_id":%q,"quantity":"1"}]}`, uuid.NewString(), uuid.NewString())
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// terminatedBackends terminates every session of each database under load:
// the processes reconnect by themselves.
func terminatedBackends(t *testing.T, r *fault.Rig) {
	underLoad(t, r, 20, 20, func(ctx context.Context) {
		for round := range 2 {
			for _, db := range []string{"order", "stock", "shipping"} {
				n, err := r.TerminateBackends(ctx, db)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("round %d: terminated %d sessions of the %s database", round, n, db)
			}
			time.Sleep(time.Second)
		}
	})
	ledger(t, r, nil)
}

// pausedListener freezes the order database's listener: the proxies of
// the order API and both relays accept connections and hold every byte.
// The leading relay gets SIGTERM while its database says nothing and must
// exit within its bound (3 s for the batch and the lock session, 2 s for
// the pool, docs/operations.md), well within a 30 s grace period.
func pausedListener(t *testing.T, r *fault.Rig) {
	underLoad(t, r, 20, 20, func(ctx context.Context) {
		leader, err := r.Leader(ctx, faultSettle)
		if err != nil {
			t.Fatal(err)
		}
		var removes []func()
		for _, p := range []string{"order-pg", "order-relay-pg", "standby-pg"} {
			remove, err := r.Net.Toxic(p, "timeout", map[string]any{"timeout": 0})
			if err != nil {
				t.Fatal(err)
			}
			removes = append(removes, remove)
		}
		time.Sleep(3 * time.Second)
		took, err := r.Term(ctx, leader, 8*time.Second)
		t.Logf("the leader relay shut down in %s while its database was frozen", took.Round(time.Millisecond))
		if err != nil {
			t.Error(err)
		}
		time.Sleep(7 * time.Second)
		for _, remove := range removes {
			remove()
		}
		if err := r.Restart(ctx, leader, faultSettle); err != nil {
			t.Error(err)
		}
	})
	ledger(t, r, nil)
}

// pausedConsumerDatabase freezes the stock and shipping databases' proxies
// (bytes held) under load, sends SIGTERM to both consumers and requires each
// to exit within 10 s: a handler's database work is bounded (the inbox's
// timeout, the consumer's 5 s shutdown grace, the pool's 2 s close).
func pausedConsumerDatabase(t *testing.T, r *fault.Rig) {
	underLoad(t, r, 20, 20, func(ctx context.Context) {
		var removes []func()
		for _, p := range []string{"stock-pg", "shipping-pg"} {
			remove, err := r.Net.Toxic(p, "timeout", map[string]any{"timeout": 0})
			if err != nil {
				t.Fatal(err)
			}
			removes = append(removes, remove)
		}
		time.Sleep(2 * time.Second)
		for _, p := range []*system.Process{r.Sys.Stock, r.Sys.Shipping} {
			took, err := r.Term(ctx, p, 10*time.Second)
			t.Logf("%s shut down in %s while its database was frozen", p.Name, took.Round(time.Millisecond))
			if err != nil {
				t.Error(err)
			}
		}
		for _, remove := range removes {
			remove()
		}
		for _, p := range []*system.Process{r.Sys.Stock, r.Sys.Shipping} {
			if err := r.Restart(ctx, p, faultSettle); err != nil {
				t.Error(err)
			}
		}
	})
	ledger(t, r, nil)
}

// memoryAlarm raises a memory alarm on the private node (publishers blocked):
// the relay notices the blocked connection, says so on /readyz, still shuts
// down on SIGTERM, and publishes once the alarm is lifted.
func memoryAlarm(node *fault.Node) func(t *testing.T, r *fault.Rig) {
	return func(t *testing.T, r *fault.Rig) {
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			leader, err := r.Leader(ctx, faultSettle)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := node.Ctl(ctx, "set_vm_memory_high_watermark", "0.0000001"); err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			lift := func() {
				once.Do(func() {
					if _, err := node.Ctl(context.WithoutCancel(ctx), "set_vm_memory_high_watermark", "0.4"); err != nil {
						t.Error(err)
					}
				})
			}
			defer lift()
			eventually(t, "the leader's /readyz reports the blocked connection", func() string {
				if st, body := readyz(ctx, leader); st != http.StatusServiceUnavailable {
					return fmt.Sprintf("/readyz %d %s", st, body)
				}
				return ""
			})
			time.Sleep(5 * time.Second)
			took, err := r.Term(ctx, leader, 15*time.Second)
			t.Logf("the leader relay shut down in %s during the alarm", took.Round(time.Millisecond))
			if err != nil {
				t.Error(err)
			}
			time.Sleep(5 * time.Second)
			lift()
			if err := r.Restart(ctx, leader, faultSettle); err != nil {
				t.Error(err)
			}
		})
		ledger(t, r, nil)
	}
}

// stopStartApp stops the broker application for 10 s and starts it again:
// every process reconnects and declares its topology.
func stopStartApp(node *fault.Node) func(t *testing.T, r *fault.Rig) {
	return func(t *testing.T, r *fault.Rig) {
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			if _, err := node.Ctl(ctx, "stop_app"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Second)
			if _, err := node.Ctl(context.WithoutCancel(ctx), "start_app"); err != nil {
				t.Fatal(err)
			}
		})
		ledger(t, r, nil)
	}
}

// readyz returns the status and body of p's /readyz.
func readyz(ctx context.Context, p *system.Process) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, strings.TrimSpace(b.String())
}

// frozenLeader freezes the leading relay with SIGSTOP: the standby
// takes the lock over and publishes; when the old leader
// thaws it finds it lost the lock. The takeover time is reported.
func frozenLeader(t *testing.T, r *fault.Rig) {
	underLoad(t, r, 20, 20, func(ctx context.Context) {
		leader, err := r.Leader(ctx, faultSettle)
		if err != nil {
			t.Fatal(err)
		}
		standby := r.Sys.Standby
		if leader == standby {
			standby = r.Sys.Relay
		}
		if err := leader.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer leader.Signal(syscall.SIGCONT) //nolint:errcheck // best effort on the way out
		start := time.Now()
		eventually(t, "the standby relay takes over", func() string {
			if v, err := standby.Metric(ctx, "relay_leader", nil); err != nil || v != 1 {
				return fmt.Sprintf("%s relay_leader %v (%v) %s after SIGSTOP of %s", standby.Name, v, err, time.Since(start).Round(time.Second), leader.Name)
			}
			return ""
		})
		t.Logf("%s took over %s after %s was frozen", standby.Name, time.Since(start).Round(100*time.Millisecond), leader.Name)
		if err := r.WaitPlaced(ctx, r.Placed()+20, faultSettle); err != nil {
			t.Fatal(err)
		}
		if err := leader.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	})
	ledger(t, r, nil)
	leaders := 0
	for _, p := range []*system.Process{r.Sys.Relay, r.Sys.Standby} {
		if v, err := p.Metric(testkit.Context(t), "relay_leader", nil); err == nil && v == 1 {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d relays report relay_leader 1 after the old leader thawed, want 1", leaders)
	}
}

// signals sends sig (SIGKILL, SIGSTOP then SIGCONT 3 s later, or SIGTERM) to
// each process in a random order at random points of the load; killed and
// terminated processes are started again, as a supervisor would. SIGTERM
// must end a process within its grace period.
func signals(sig string, seed uint64) func(t *testing.T, r *fault.Rig) {
	return func(t *testing.T, r *fault.Rig) {
		rng := rand.New(rand.NewPCG(seed, uint64(len(sig))))
		var order []string
		for _, p := range r.Sys.All() {
			order = append(order, p.Name)
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		delays := make([]time.Duration, len(order))
		for i := range delays {
			delays[i] = time.Duration(200+rng.IntN(1500)) * time.Millisecond
		}
		underLoad(t, r, 10, 20, func(ctx context.Context) {
			var errs []error
			for i, name := range order {
				time.Sleep(delays[i])
				p := r.Process(name)
				var err error
				switch sig {
				case "SIGKILL":
					err = r.Kill(ctx, p, faultSettle)
				case "SIGSTOP":
					err = r.Freeze(ctx, p, 3*time.Second)
				case "SIGTERM":
					var took time.Duration
					took, err = r.Term(ctx, p, 15*time.Second)
					t.Logf("%s stopped in %s", name, took.Round(time.Millisecond))
					err = errors.Join(err, r.Restart(ctx, p, faultSettle))
				}
				errs = append(errs, err)
			}
			if err := errors.Join(errs...); err != nil {
				t.Error(err)
			}
		})
		ledger(t, r, nil)
	}
}
