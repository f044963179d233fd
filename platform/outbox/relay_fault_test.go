package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/testkit"
)

// One of two bound queues refuses publishes (max-length 1, reject-publish):
// the relay retries only the failing row, so the healthy queue gets each
// event a bounded number of times, and once the refusing queue drains
// everything is published, in order.
func TestRelayRetriesOnlyTheFailingRowWhileAQueueRefuses(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	healthy := consume(t, topo.Queues[0].Name)
	refusing := refusingQueue(t, topo.Exchange, false)

	const n = 40
	for i := range n {
		insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, fmt.Sprint(i))
	}
	order := orderedIDs(t, pool)
	// The first row fills the refusing queue; the second is nacked.
	stuck := order[1]
	logger, logs := testkit.Logger(t)
	reg := prometheus.NewRegistry()
	pub := newPublisher(t, topo)
	r, err := NewRelay(pool, func() Publisher { return pub }, fastConfig(), logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	start(t, testRelay{Relay: r, reg: reg})

	eventually(t, "six failed attempts on the stuck row", func() bool { return readOutbox(t, pool)[stuck].Attempts >= 6 })
	if s := readOutbox(t, pool)[stuck]; !strings.Contains(s.LastError, "nack") {
		t.Fatalf("last_error %q does not say nack", s.LastError)
	}
	// The refusing queue drains.
	refused := consume(t, refusing)
	eventually(t, "all rows marked", func() bool { return countUnpublished(t, pool) == 0 })

	copies := map[string]int{}
	for _, d := range drain(healthy, 500*time.Millisecond) {
		copies[d.MessageId]++
	}
	drain(refused, 100*time.Millisecond)
	state := readOutbox(t, pool)
	failedBefore, maxCopies, total := 0, 0, 0
	for _, id := range order {
		s, c := state[id], copies[id]
		total += c
		maxCopies = max(maxCopies, c)
		// Sent once at first, once more after each failure streak at an
		// earlier row, and once per attempt of its own.
		if c < 1 || c > 1+failedBefore+s.Attempts {
			t.Fatalf("row %s (attempts %d, %d earlier rows failed) reached the healthy queue %d times",
				id, s.Attempts, failedBefore, c)
		}
		if s.Attempts > 0 {
			failedBefore++
		}
	}
	t.Logf("healthy queue: %d deliveries of %d events, at most %d copies of one; the stuck row failed %d times; %d rows ever failed",
		total, n, maxCopies, state[stuck].Attempts, failedBefore)

	// Published in order: published_at never goes down along (occurred_at, id).
	var disordered int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM (
		SELECT published_at < lag(published_at) OVER (ORDER BY occurred_at, id) AS back FROM outbox) x WHERE back`).Scan(&disordered); err != nil {
		t.Fatal(err)
	}
	if disordered != 0 {
		t.Fatalf("%d rows marked published before an older row", disordered)
	}
	if got := strings.Count(logs.String(), "cannot publish; retrying"); got != 1 {
		t.Fatalf("%d WARN lines for one failure streak, want 1", got)
	}
	if !strings.Contains(logs.String(), "publishes again") {
		t.Fatal("no log line for the end of the failure streak")
	}
}

// A failed publish is recorded on its row even when the batch's transaction
// is gone by then; Ready reports the relay that cannot publish.
func TestRelayRecordsAFailureWhenTheBatchTransactionExpired(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	refusing := refusingQueue(t, topo.Exchange, true)
	id := insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, "expired")
	cfg := fastConfig()
	cfg.StallTimeout = 300 * time.Millisecond
	var ended atomic.Int32
	var healed atomic.Bool
	pub := &hookedPublisher{Publisher: newPublisher(t, topo)}
	r := newTestRelay(t, pool, pub, cfg)
	pub.after = func(int) {
		if healed.Load() {
			return
		}
		// The server ends the batch's transaction while the relay waits for
		// the broker (as idle_in_transaction_session_timeout would).
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Errorf("end the batch transaction: %v", err)
		}
		ended.Add(int32(n))
	}
	start(t, r)

	eventually(t, "two failures recorded", func() bool { return readOutbox(t, pool)[id].Attempts >= 2 })
	if ended.Load() < 2 {
		t.Fatalf("ended %d batch transactions", ended.Load())
	}
	if s := readOutbox(t, pool)[id]; !strings.Contains(s.LastError, "nack") || s.Published {
		t.Fatalf("row %+v", s)
	}
	if testutil.ToFloat64(r.m.failures) < 2 {
		t.Fatalf("relay_publish_failures_total = %v", testutil.ToFloat64(r.m.failures))
	}
	eventually(t, "Ready reports the relay that cannot publish", func() bool {
		err := r.Ready()
		return err != nil && strings.Contains(err.Error(), "nack")
	})
	healed.Store(true)
	consume(t, refusing)
	eventually(t, "row published and Ready again", func() bool { return readOutbox(t, pool)[id].Published && r.Ready() == nil })
}

// When the broker cannot be reached at all, last_error says why (connection
// refused), not only that the publish ran out of time.
func TestRelayRecordsWhyTheBrokerIsUnreachable(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	u, err := url.Parse(testkit.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := amqp.DialOptions(ctx, u.String(), topo, testLogger(t), amqp.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pub := amqp.NewPublisher(conn, topo.Exchange)
	t.Cleanup(func() { _ = pub.Close() })
	cfg := fastConfig()
	cfg.ConfirmTimeout = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	r, err := NewRelay(pool, func() Publisher { return AMQPPublisher(pub) }, cfg, testLogger(t), reg, WithBrokerStatus(conn.Ready))
	if err != nil {
		t.Fatal(err)
	}
	start(t, testRelay{Relay: r, reg: reg})
	insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, "before")
	receive(t, in, 1)
	eventually(t, "the first row marked", func() bool { return countUnpublished(t, pool) == 0 })

	proxy.stop() // the broker's address refuses connections from now on
	id := insertEvent(t, t.Context(), pool, contracts.EventOrderPlaced, "during")
	eventually(t, "the failure recorded", func() bool { return readOutbox(t, pool)[id].Attempts >= 1 })
	if s := readOutbox(t, pool)[id]; !strings.Contains(s.LastError, "connection refused") {
		t.Fatalf("last_error %q does not say connection refused", s.LastError)
	}
}

// tcpProxy forwards connections to target until stop, after which its
// address refuses connections.
type tcpProxy struct {
	target, addr string
	ln           net.Listener
	mu           sync.Mutex
	conns        []net.Conn
	wg           sync.WaitGroup
}

// newTCPProxy listens on a free port and forwards to target (host:port).
func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: target, addr: ln.Addr().String(), ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
			}
			p.wg.Go(func() { pipe(up, c) })
			p.wg.Go(func() { pipe(c, up) })
		}
	})
	t.Cleanup(p.stop)
	return p
}

// stop closes the listener and every forwarded connection.
func (p *tcpProxy) stop() {
	err := p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	if !errors.Is(err, net.ErrClosed) {
		p.wg.Wait()
	}
}

// refusingQueue declares a queue bound to exchange for order.order.placed.v1
// that holds one message at most and refuses more (reject-publish: the
// publisher gets a nack); full puts a message in it at once. It is deleted
// when the test ends.
func refusingQueue(t testing.TB, exchange string, full bool) string {
	t.Helper()
	raw := rawChannel(t)
	q := testkit.UniqueName(t, "relay-refusing")
	if _, err := raw.QueueDeclare(q, false, false, false, false, amqp091.Table{
		"x-max-length": int32(1), "x-overflow": "reject-publish",
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = rawChannel(t).QueueDelete(q, false, false, false) })
	if err := raw.QueueBind(q, contracts.EventOrderPlaced, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	if full {
		if err := raw.PublishWithContext(t.Context(), "", q, false, false, amqp091.Publishing{Body: []byte("filler")}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the refusing queue is full", func() bool {
			st, err := raw.QueueDeclarePassive(q, false, false, false, false, nil)
			return err == nil && st.Messages == 1
		})
	}
	return q
}
