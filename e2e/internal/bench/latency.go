package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
)

// Names of the bench-only triggers that report committed reservations (in the
// stock database) and confirmed orders (in the order database, once stock's
// answer came back).
const (
	reservedChannel = "bench_reserved"
	reservedTrigger = `CREATE FUNCTION bench_reserved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('` + reservedChannel + `', NEW.order_id::text);
	RETURN NULL;
END;
$$;
CREATE TRIGGER bench_reserved AFTER INSERT ON reservation FOR EACH ROW EXECUTE FUNCTION bench_reserved();`
	confirmedChannel = "bench_confirmed"
	confirmedTrigger = `CREATE FUNCTION bench_confirmed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('` + confirmedChannel + `', NEW.id::text);
	RETURN NULL;
END;
$$;
CREATE TRIGGER bench_confirmed AFTER UPDATE OF status ON orders FOR EACH ROW
WHEN (NEW.status = 'confirmed') EXECUTE FUNCTION bench_confirmed();`
)

// warmupOrders are placed and awaited before the measured placements.
const warmupOrders = 20

// measureLatency runs the whole system (bin/order serve and relay,
// bin/stock, bin/shipping through e2e/internal/system) twice on fresh
// databases and vhosts: once as shipped (the relay wakes on NOTIFY) and
// once with polling only (the outbox trigger dropped, RELAY_POLL_INTERVAL=1s).
// Each time it places orders at LatencyRate per second for LatencyDuration
// and records, per order, the time from sending POST /orders/{id}/place to
// the commit of its reservation in the stock database, and to the commit of
// its confirmation in the order database (stock's answer relayed back and
// applied), with the CPU per order of each (as shipped only).
func (e *env) measureLatency(ctx context.Context) error {
	s := e.cfg.Sizes
	busy, err := machineBusy(ctx, 3*time.Second)
	if err != nil {
		return err
	}
	load, _ := LoadAverage()
	before := fmt.Sprintf("before the run %.2f of %d CPUs busy, load average %.1f", busy, runtime.NumCPU(), load)
	e.progress("   %s", before)
	if busy > quietBusyShare*float64(runtime.NumCPU()) {
		e.progress("!! the machine is busy: the latency goals are not judged")
		for _, name := range []string{"latency_notify_p50", "latency_notify_p99"} {
			e.results.unjudge(name, fmt.Sprintf("other work kept %.2f of %d CPUs busy before the run", busy, runtime.NumCPU()))
		}
	}
	for _, notify := range []bool{true, false} {
		prefix, vhost := "latency_notify_", "latency-notify"
		if !notify {
			prefix, vhost = "latency_poll_", "latency-poll"
		}
		run, err := e.runLatency(ctx, vhost, notify, s.LatencyRate, s.LatencyDuration)
		if err != nil {
			return fmt.Errorf("%s: %w", vhost, err)
		}
		note := fmt.Sprintf("%d orders at %d/s, POST place -> reservation committed; %s", len(run.lat), s.LatencyRate, before)
		e.progress("   %s", run.cpu)
		wake := "notify"
		if !notify {
			wake = "poll"
		}
		relaySide := run.cpu.perOrder("relay") + run.cpu.perOrder("pg_relay")
		e.results.set(cpuRelayWakeName(wake, s.LatencyRate), relaySide,
			note+", CPU ms per order of bin/order relay and its PostgreSQL sessions, woken by "+wake)
		for _, p := range []struct {
			name string
			q    float64
		}{{"p50", 0.50}, {"p95", 0.95}, {"p99", 0.99}} {
			v := percentile(run.lat, p.q)
			e.results.set(prefix+p.name, v, note)
			e.progress("   %-28s %10.1f ms", prefix+p.name, v)
		}
		if !notify {
			continue
		}
		confirmedNote := fmt.Sprintf("%d orders at %d/s, POST place -> order confirmed (stock's answer applied)", len(run.confirmed), s.LatencyRate)
		for _, p := range []struct {
			name string
			q    float64
		}{{"p50", 0.50}, {"p99", 0.99}} {
			v := percentile(run.confirmed, p.q)
			e.results.set(prefix+"confirmed_"+p.name, v, confirmedNote)
			e.progress("   %-28s %10.1f ms", prefix+"confirmed_"+p.name, v)
		}
		e.progress("   to confirmed: %s", run.cpuConfirmed)
		e.results.set(cpuPerOrderName("reservation", s.LatencyRate), run.cpu.perOrder("shop"), note+", CPU ms per order of every shop process, PostgreSQL and RabbitMQ")
		e.results.set(cpuPerOrderName("confirmed", s.LatencyRate), run.cpuConfirmed.perOrder("shop"), confirmedNote+", CPU ms per order of every shop process, PostgreSQL and RabbitMQ")
		for _, stage := range stageNames {
			for _, p := range []struct {
				name string
				q    float64
			}{{"p50", 0.50}, {"p99", 0.99}} {
				var v float64
				if histogramStages[stage] {
					q := run.confirm[stage]
					if q == nil {
						continue
					}
					v = q[0]
					if p.name == "p99" {
						v = q[1]
					}
				} else {
					v = percentile(run.stages[stage], p.q)
				}
				name := stageName(stage, p.name)
				e.results.set(name, v, fmt.Sprintf("stage %s of the %d/s run", stage, s.LatencyRate))
				e.progress("   %-28s %10.1f ms", name, v)
			}
		}
	}
	return nil
}

// measureMaxRate places orders at rising steady rates (MaxRates, each for
// MaxRateDuration, the system as shipped on fresh databases) and reports, for
// each leg, the highest rate up to which its p99 stayed under 100 ms: place ->
// reservation (latency_max_rate_reservation_p99_under_100ms) and place ->
// confirmed, stock's answer applied (latency_max_rate_confirmed_p99_under_100ms).
// A rate whose placements fell behind their schedule misses for both. It stops
// at the first rate at which the reservation leg misses.
func (e *env) measureMaxRate(ctx context.Context) error {
	s := e.cfg.Sizes
	best, bestConfirmed := 0, 0
	confirmedMissed := false
	for n, rate := range s.MaxRates {
		run, err := e.runLatency(ctx, fmt.Sprintf("max-rate-%d", n), true, rate, s.MaxRateDuration)
		if errors.Is(err, errUnavailable) {
			// The API shed load (its database budget ran out): a miss.
			e.progress("   %5d orders/s: missed, %v", rate, err)
			break
		}
		if err != nil {
			return fmt.Errorf("%d orders/s: %w", rate, err)
		}
		p50, p99 := percentile(run.lat, 0.5), percentile(run.lat, 0.99)
		c50, c99 := percentile(run.confirmed, 0.5), percentile(run.confirmed, 0.99)
		e.progress("   %5d orders/s: reservation p50 %.1f ms, p99 %.1f ms; confirmed p50 %.1f ms, p99 %.1f ms (placing kept %.0f%% of the schedule)",
			rate, p50, p99, c50, c99, 100*run.onTime)
		e.progress("     %s", run.cpu)
		note := fmt.Sprintf("%d orders at %d/s", len(run.lat), rate)
		e.results.set(rateName(rate, "p50"), p50, note+", POST place -> reservation committed")
		e.results.set(rateName(rate, "p99"), p99, note+", POST place -> reservation committed")
		e.results.set(rateName(rate, "confirmed_p50"), c50, note+", POST place -> order confirmed")
		e.results.set(rateName(rate, "confirmed_p99"), c99, note+", POST place -> order confirmed")
		for _, g := range cpuGroups {
			e.results.set(rateName(rate, "cpu_"+g), run.cpu.perOrder(g), note+", CPU ms per order of "+g)
		}
		e.results.set(rateName(rate, "shop_cores"), run.cpu.cores("shop"), note+", CPU of the bench, the shop, PostgreSQL and RabbitMQ per second")
		e.results.set(rateName(rate, "machine_busy_cores"), run.cpu.busyCores, note+", busy CPUs of the machine (/proc/stat), other work included")
		e.results.set(rateName(rate, "idle_pct"), 100*run.cpu.idle, note+", idle share of the machine (/proc/stat)")
		if run.onTime < 0.9 {
			break
		}
		if confirmedMissed = confirmedMissed || c99 >= 100; !confirmedMissed {
			bestConfirmed = rate
		}
		if p99 >= 100 {
			break
		}
		best = rate
	}
	for _, r := range []struct {
		name, leg string
		best      int
	}{{maxRateReservationName, "place -> reservation", best}, {maxRateConfirmedName, "place -> confirmed", bestConfirmed}} {
		e.results.set(r.name, float64(r.best), fmt.Sprintf("highest of %v orders/s, %s each, up to which %s p99 < 100 ms", s.MaxRates, s.MaxRateDuration, r.leg))
		e.progress("   %-44s %6d orders/s", r.name, r.best)
	}
	return nil
}

// The maxrate search's results: the highest rate of each leg with p99 < 100 ms.
const (
	maxRateReservationName = "latency_max_rate_reservation_p99_under_100ms"
	maxRateConfirmedName   = "latency_max_rate_confirmed_p99_under_100ms"
)

// cpuRelayWakeName is the name of the relay side's CPU per order of the
// latency run whose relay is woken by wake ("notify" or "poll").
func cpuRelayWakeName(wake string, rate int) string {
	return fmt.Sprintf("cpu_ms_per_order_relay_side_%s_%d", wake, rate)
}

// cpuPerOrderName is the name of the CPU per order of the journey from place
// to leg ("reservation" or "confirmed") at rate orders/s.
func cpuPerOrderName(leg string, rate int) string {
	return fmt.Sprintf("cpu_ms_per_order_%s_%d", leg, rate)
}

// latencyRun is what one latency run measured.
type latencyRun struct {
	lat          []time.Duration            // place -> reservation, sorted
	confirmed    []time.Duration            // place -> order confirmed, sorted
	cpuConfirmed cpuUse                     // from the first measured placement to the last confirmation
	stages       map[string][]time.Duration // per stage but histogramStages, sorted
	confirm      map[string][]float64       // per histogramStages stage: the relay's confirm latency p50, p99 in ms, when known
	onTime       float64                    // scheduled duration / time placing took (1 = kept the rate)
	cpu          cpuUse                     // from the first measured placement to the last reservation
}

// percentile returns the nearest-rank q-quantile of sorted, in ms.
func percentile(sorted []time.Duration, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i].Microseconds()) / 1000
}

// runLatency runs one latency measurement at rate orders per second for
// duration and returns the sorted latencies of the measured orders and
// their stages.
func (e *env) runLatency(ctx context.Context, vhost string, notify bool, rate int, duration time.Duration) (latencyRun, error) {
	var run latencyRun
	dbURLs := map[string]string{} // a clone for every service of the registry
	for _, svc := range contracts.Services() {
		u, err := e.cloneDatabase(ctx, svc.Name, vhost+"-"+svc.Name)
		if err != nil {
			return run, err
		}
		dbURLs[svc.Name] = u
	}
	orderURL, stockURL := dbURLs[tplOrder], dbURLs[tplStock]
	amqpURL, err := e.vhostURL(vhost)
	if err != nil {
		return run, err
	}
	defer func() {
		if err := emptyVhost(amqpURL); err != nil {
			e.progress("   %v", err)
		}
	}()
	if !notify {
		if err := execSQL(ctx, orderURL, `DROP TRIGGER outbox_inserted ON outbox`); err != nil {
			return run, fmt.Errorf("disable NOTIFY: %w", err)
		}
	}
	if err := execSQL(ctx, stockURL, reservedTrigger); err != nil {
		return run, fmt.Errorf("reservation trigger: %w", err)
	}
	if err := execSQL(ctx, orderURL, confirmedTrigger); err != nil {
		return run, fmt.Errorf("confirmation trigger: %w", err)
	}

	sys, err := system.New(system.Config{
		BinDir:  e.cfg.BinDir,
		DBURLs:  dbURLs,
		AMQPURL: amqpURL,
		Env:     []string{"LOG_LEVEL=warn"},
		ProcessEnv: map[string][]string{
			"order-relay": append([]string{"RELAY_POLL_INTERVAL=1s"}, e.cfg.RelayEnv...),
			"stock-relay": e.cfg.RelayEnv,
		},
	})
	if err != nil {
		return run, err
	}
	if err := sys.Start(ctx, time.Minute); err != nil {
		return run, err
	}
	defer func() { _ = sys.Stop() }()

	w, stopWatch, err := watch(ctx, stockURL, reservedChannel, "reservation")
	if err != nil {
		return run, err
	}
	defer stopWatch()
	wc, stopWatchConfirmed, err := watch(ctx, orderURL, confirmedChannel, "confirmation")
	if err != nil {
		return run, err
	}
	defer stopWatchConfirmed()

	c := newOrderClient(sys.OrderAPI.Addr)
	defer c.close()
	n := int(float64(rate) * duration.Seconds())
	ids, err := c.createMany(ctx, warmupOrders+n, 8)
	if err != nil {
		return run, err
	}
	// Warm up every connection pool on the way, one order at a time.
	for _, id := range ids[:warmupOrders] {
		if err := c.place(ctx, id); err != nil {
			return run, err
		}
	}
	for _, w := range []*watcher{w, wc} {
		if err := w.waitFor(ctx, ids[:warmupOrders], 30*time.Second); err != nil {
			return run, fmt.Errorf("warm-up: %w", err)
		}
	}

	admin, err := pgx.Connect(ctx, e.cfg.DatabaseURL)
	if err != nil {
		return run, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	probe := &cpuProbe{admin: admin, pids: map[string]int{"order_api": sys.OrderAPI.PID(), "relay": sys.Relay.PID(),
		"stock": sys.Stock.PID(), "shipping": sys.Shipping.PID()}}
	if p := sys.Process(system.RelayName(contracts.ProducerStock)); p != nil {
		probe.pids["stock_relay"] = p.PID()
	}
	before, err := probe.snapshot(ctx)
	if err != nil {
		return run, fmt.Errorf("CPU before: %w", err)
	}

	measured := ids[warmupOrders:]
	sent := make([]time.Time, len(measured))
	answered := make([]time.Duration, len(measured))
	errs := make(chan error, len(measured))
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	tick := time.NewTimer(0)
	defer tick.Stop()
	<-tick.C
	start := time.Now()
	for i, id := range measured {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			tick.Reset(d)
			select {
			case <-ctx.Done():
				return run, ctx.Err()
			case <-tick.C:
			}
		}
		wg.Go(func() {
			sent[i] = time.Now()
			if err := c.place(ctx, id); err != nil {
				errs <- err
			}
			answered[i] = time.Since(sent[i])
		})
	}
	wg.Wait()
	placing := time.Since(start)
	close(errs)
	var failed []error
	unavailable := 0
	for err := range errs {
		if errors.Is(err, errUnavailable) {
			unavailable++
		}
		failed = append(failed, err)
	}
	if unavailable == len(failed) && unavailable > 0 {
		return run, fmt.Errorf("%d of %d places: %w", unavailable, len(measured), errUnavailable)
	}
	if len(failed) > 0 {
		return run, fmt.Errorf("%w; order API output:\n%s", failed[0], tail(sys.OrderAPI.Output(), 4000))
	}
	if err := w.waitFor(ctx, measured, 60*time.Second); err != nil {
		return run, err
	}
	after, err := probe.snapshot(ctx)
	if err != nil {
		return run, fmt.Errorf("CPU after: %w", err)
	}
	run.cpu = probe.use(before, after, len(measured))
	if err := wc.waitFor(ctx, measured, 60*time.Second); err != nil {
		return run, err
	}
	afterConfirmed, err := probe.snapshot(ctx)
	if err != nil {
		return run, fmt.Errorf("CPU after the confirmations: %w", err)
	}
	run.cpuConfirmed = probe.use(before, afterConfirmed, len(measured))
	run.lat = make([]time.Duration, len(measured))
	run.confirmed = make([]time.Duration, len(measured))
	for i, id := range measured {
		run.lat[i] = w.at(id).Sub(sent[i])
		run.confirmed[i] = wc.at(id).Sub(sent[i])
	}
	slices.Sort(run.lat)
	slices.Sort(run.confirmed)
	run.onTime = min(1, duration.Seconds()/placing.Seconds())
	if run.stages, err = stageTimes(ctx, orderURL, stockURL, measured, answered, w, wc); err != nil {
		return run, fmt.Errorf("stage times: %w", err)
	}
	if notify {
		run.confirm = map[string][]float64{}
		for stage, relay := range map[string]*system.Process{"confirm": sys.Relay, "answer_confirm": sys.Process(system.RelayName(contracts.ProducerStock))} {
			if relay == nil {
				continue
			}
			if q, err := histogramQuantiles(ctx, "http://"+relay.Addr+"/metrics", "relay_confirm_latency_seconds", 0.5, 0.99); err == nil {
				run.confirm[stage] = q
			} else {
				e.progress("   (no %s latency: %v)", stage, err)
			}
		}
	}
	e.progress("   (POST place answered in p50 %.1f ms, p99 %.1f ms; placing took %s for %s of schedule)",
		percentile(run.stages["api"], 0.5), percentile(run.stages["api"], 0.99), placing.Round(time.Millisecond), duration)
	return run, nil
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func execSQL(ctx context.Context, dbURL, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// watcher records when each order's reservation (or confirmation) was
// committed, from the notifications of a bench trigger.
type watcher struct {
	what string // "reservation" or "confirmation", for errors
	mu   sync.Mutex
	seen map[string]time.Time
}

// watch listens on channel of the database at dbURL and records each order id
// notified there until stop is called.
func watch(ctx context.Context, dbURL, channel, what string) (w *watcher, stop func(), err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	w = &watcher{what: what, seen: map[string]time.Time{}}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.run(wctx, conn) }()
	return w, func() { cancel(); <-done; conn.Close(context.WithoutCancel(ctx)) }, nil
}

func (w *watcher) run(ctx context.Context, conn *pgx.Conn) {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		w.mu.Lock()
		if _, ok := w.seen[n.Payload]; !ok {
			w.seen[n.Payload] = now
		}
		w.mu.Unlock()
	}
}

func (w *watcher) at(id string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[id]
}

// waitFor waits until every order in ids has a reservation (or confirmation).
func (w *watcher) waitFor(ctx context.Context, ids []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		missing := 0
		w.mu.Lock()
		for _, id := range ids {
			if _, ok := w.seen[id]; !ok {
				missing++
			}
		}
		w.mu.Unlock()
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d orders have no %s after %s", missing, len(ids), w.what, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// orderClient calls the order API over HTTP/1.1 keep-alive connections of its
// own: the calling goroutine writes each request and reads its answer, so a
// request costs no hand-off to net/http's two goroutines per connection (the
// bench shares the machine's CPUs with the system it measures). Up to
// maxIdleConns connections are kept for reuse; close closes them.
type orderClient struct {
	addr string
	idle chan *clientConn
}

// maxIdleConns is the number of connections an orderClient keeps open for
// reuse, above the bench's concurrency, so connection set-up does not add to
// the latency.
const maxIdleConns = 256

// requestTimeout bounds one request of an orderClient.
const requestTimeout = 30 * time.Second

type clientConn struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func newOrderClient(addr string) *orderClient {
	return &orderClient{addr: addr, idle: make(chan *clientConn, maxIdleConns)}
}

// close closes the idle connections.
func (c *orderClient) close() {
	for {
		select {
		case cc := <-c.idle:
			_ = cc.conn.Close()
		default:
			return
		}
	}
}

// createMany creates n draft orders of one line with the given number of
// concurrent clients and returns their ids.
func (c *orderClient) createMany(ctx context.Context, n, clients int) ([]string, error) {
	ids := make([]string, n)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for k := range clients {
		wg.Go(func() {
			for i := k; i < n; i += clients {
				id, err := c.create(ctx)
				if err != nil {
					errs[k] = err
					return
				}
				ids[i] = id
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func (c *orderClient) create(ctx context.Context) (string, error) {
	body, _ := json.Marshal(map[string]any{
		"customer_id": uuid.NewString(),
		"lines":       []map[string]string{{"product_id": uuid.NewString(), "quantity": "1.000"}},
	})
	var o struct {
		ID string `json:"id"`
	}
	status, raw, err := c.do(ctx, "/orders", body)
	if err != nil {
		return "", err
	}
	if status != http.StatusCreated {
		return "", fmt.Errorf("create order: status %d: %s", status, raw)
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("create order: %w", err)
	}
	return o.ID, nil
}

// errUnavailable is the error of a place answered 503: the order API gave up
// on the database within its budget (DatabaseTimeout), as it does when it is
// sent more than it can do.
var errUnavailable = errors.New("the order API answered 503")

func (c *orderClient) place(ctx context.Context, id string) error {
	status, raw, err := c.do(ctx, "/orders/"+id+"/place", nil)
	if err != nil {
		return err
	}
	if status == http.StatusServiceUnavailable {
		return fmt.Errorf("place order %s: %w: %s", id, errUnavailable, raw)
	}
	if status != http.StatusOK {
		return fmt.Errorf("place order %s: status %d: %s", id, status, raw)
	}
	return nil
}

// do sends POST path with body (JSON, none when nil) and returns the answer's
// status and body. A connection that fails is closed, never reused; the
// request is not retried (a place is not idempotent without a key).
func (c *orderClient) do(ctx context.Context, path string, body []byte) (int, []byte, error) {
	var cc *clientConn
	select {
	case cc = <-c.idle:
	default:
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, nil, fmt.Errorf("POST %s: %w", path, err)
		}
		cc = &clientConn{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}
	}
	status, raw, keep, err := cc.roundTrip(ctx, c.addr, path, body)
	if err != nil || !keep {
		_ = cc.conn.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("POST %s: %w", path, err)
		}
		return status, raw, nil
	}
	select {
	case c.idle <- cc:
	default:
		_ = cc.conn.Close()
	}
	return status, raw, nil
}

// roundTrip writes one request and reads its answer within requestTimeout
// (or until ctx ends). keep reports whether the connection can be reused.
func (cc *clientConn) roundTrip(ctx context.Context, host, path string, body []byte) (status int, raw []byte, keep bool, err error) {
	deadline := time.Now().Add(requestTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := cc.conn.SetDeadline(deadline); err != nil {
		return 0, nil, false, err
	}
	stop := context.AfterFunc(ctx, func() { _ = cc.conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() { // ctx ended: the deadline may be cut short at any time
			keep = false
		}
	}()
	cc.w.WriteString("POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\n")
	if body != nil {
		cc.w.WriteString("Content-Type: application/json\r\n")
	}
	cc.w.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	cc.w.Write(body)
	if err := cc.w.Flush(); err != nil {
		return 0, nil, false, errors.Join(err, ctx.Err())
	}
	resp, err := http.ReadResponse(cc.r, nil)
	if err != nil {
		return 0, nil, false, errors.Join(err, ctx.Err())
	}
	raw, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return 0, nil, false, errors.Join(err, ctx.Err())
	}
	return resp.StatusCode, raw, !resp.Close, nil
}
