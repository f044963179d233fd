package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

// relayPartitions and relayProcesses span the relay matrix: every
// partition count with every number of `bin/order relay` processes.
var (
	relayPartitions = []int{1, 2, 4, 8}
	relayProcesses  = []int{1, 2}
)

func relayRunName(partitions, procs int) string {
	return fmt.Sprintf("relay_p%d_r%d", partitions, procs)
}

func relayVhost(partitions, procs int) string { return fmt.Sprintf("relay-p%d-r%d", partitions, procs) }

// measureRelay fills one outbox with RelayRows unpublished rows, half of
// them order.order.placed.v1 of RelayRows/2 orders, the other half their
// order.order.cancelled.v1 (each order's cancelled RelayRows/2 rows after
// its placed), and clones it for every run. The baseline drains one clone
// in this process, one confirm at a time, for OneAtATimeLimit. Then, for
// each partition count and number of processes, real `bin/order relay`
// processes with RELAY_PARTITIONS drain a clone on a fresh vhost; the
// queue stock.events is then read back and each order's first arrivals
// checked: placed before cancelled.
func (e *env) measureRelay(ctx context.Context) error {
	s := e.cfg.Sizes
	srcURL, err := e.cloneDatabase(ctx, tplOrder, "relay-src")
	if err != nil {
		return err
	}
	pool, err := pg.NewPool(ctx, srcURL)
	if err != nil {
		return err
	}
	err = fillOrderPairs(ctx, pool, time.Now().Add(-time.Hour), s.RelayRows/2)
	if err == nil {
		err = settle(ctx, pool, "outbox")
	}
	pool.Close()
	if err != nil {
		return err
	}
	rows := s.RelayRows / 2 * 2

	dbURL, err := e.createDatabase(ctx, e.dbName("relay_one_at_a_time"), e.dbName("relay-src"))
	if err != nil {
		return err
	}
	amqpURL, err := e.vhostURL("relay-one")
	if err != nil {
		return err
	}
	var errs []error
	rate, published, err := e.runRelay(ctx, dbURL, amqpURL, "one-at-a-time", s.OneAtATimeLimit)
	if err2 := emptyVhost(amqpURL); err2 != nil {
		e.progress("   %v", err2)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("relay_one_at_a_time: %w", err))
		e.progress("   %-28s FAILED: %v", "relay_one_at_a_time", err)
	} else {
		e.results.set("relay_one_at_a_time", rate, fmt.Sprintf("%d of %d outbox rows published, one confirm at a time, in this process", published, rows))
		e.progress("   %-28s %10.0f events/s (%d rows)", "relay_one_at_a_time", rate, published)
	}

	ceiling, _ := e.results.get("broker_ceiling")
	violations := 0
	for _, procs := range relayProcesses {
		for _, parts := range relayPartitions {
			name := relayRunName(parts, procs)
			r, err := e.runRelayProcesses(ctx, parts, procs, rows)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				e.progress("   %-28s FAILED: %v", name, err)
				continue
			}
			violations += r.disordered
			cpu := fmt.Sprintf("CPU per event: relay %.3f + PostgreSQL %.3f + RabbitMQ %.3f ms = %.2f cores busy",
				r.relayMs, r.dbMs, r.brokerMs, r.cores())
			e.results.set(name, r.rate, fmt.Sprintf("%d rows, RELAY_PARTITIONS=%d, %d bin/order relay process(es); %d orders out of order, %d duplicates; %s",
				rows, parts, procs, r.disordered, r.duplicates, cpu))
			e.results.set("cpu_ms_"+name, r.relayMs+r.dbMs+r.brokerMs, "CPU time per event of "+name+": "+cpu)
			if parts == 1 && procs == 1 {
				e.results.set(cpuRelaySideName, r.relayMs+r.dbMs, "CPU time per event of "+name+", the relay process and its PostgreSQL sessions: "+cpu)
			}
			ratio := ""
			if ceiling > 0 {
				ratio = fmt.Sprintf(" (%.2f of the broker ceiling)", r.rate/ceiling)
			}
			e.progress("   %-28s %10.0f events/s%s; order check: %d orders out of order, %d duplicates; %s", name, r.rate, ratio, r.disordered, r.duplicates, cpu)
		}
	}
	e.results.set("relay_order_violations", float64(violations), "orders whose cancelled first arrived before their placed, over every relay run")
	if one, _ := e.results.get("relay_one_at_a_time"); one > 0 {
		if p1, ok := e.results.get(relayRunName(1, 1)); ok {
			e.results.set("relay_pipelined_speedup", p1/one, "relay_p1_r1 divided by relay_one_at_a_time")
		}
	}
	if err := e.measureTracedRelay(ctx); err != nil {
		errs = append(errs, err)
		e.progress("   %-28s FAILED: %v", "relay_pipelined_traced", err)
	}
	return errors.Join(errs...)
}

// relayRun is the outcome of one run of relay processes: the rate, the
// order check, and the CPU time per event (ms) of the relay processes,
// their PostgreSQL sessions and RabbitMQ, from /proc.
type relayRun struct {
	rate                    float64
	disordered, duplicates  int
	relayMs, dbMs, brokerMs float64
}

// cores is the CPU the run kept busy: every counted process, in cores.
func (r relayRun) cores() float64 { return (r.relayMs + r.dbMs + r.brokerMs) * r.rate / 1000 }

// relayMemberClass is the class of the relays' membership lock for
// outbox.DefaultLockKey (platform/outbox/leader.go, lockKeys.member). A
// session holding it for a partition count no relay has (0) makes every relay
// stand by ("relays with another partition count are running") until it lets
// go: the gate of runRelayProcesses. The run checks that nothing was published
// while the gate was shut, so a change of the protocol cannot go unseen.
const relayMemberClass = int32(outbox.DefaultLockKey&0x3fffffff) + 2

// runRelayProcesses drains a clone of the relay source database with procs
// real relay processes configured with parts partitions, and checks the
// order of what reached stock.events. The processes start while the bench
// holds the gate (relayMemberClass), which keeps them standing by; the clock
// starts when it lets go and stops when no row is left unpublished.
func (e *env) runRelayProcesses(ctx context.Context, parts, procs, rows int) (relayRun, error) {
	name := relayRunName(parts, procs)
	dbURL, err := e.createDatabase(ctx, e.dbName(name), e.dbName("relay-src"))
	if err != nil {
		return relayRun{}, err
	}
	amqpURL, err := e.vhostURL(relayVhost(parts, procs))
	if err != nil {
		return relayRun{}, err
	}
	defer func() {
		if err := emptyVhost(amqpURL); err != nil {
			e.progress("   %v", err)
		}
	}()
	pool, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return relayRun{}, err
	}
	defer pool.Close()
	gate, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return relayRun{}, err
	}
	defer gate.Close(context.WithoutCancel(ctx))
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock_shared($1::int, 0)`, relayMemberClass); err != nil {
		return relayRun{}, fmt.Errorf("hold the relays back: %w", err)
	}

	var ps []*system.Process
	defer func() {
		for _, p := range ps {
			_ = p.Stop(10 * time.Second)
		}
	}()
	for i := range procs {
		addr, err := testkit.FreeAddr()
		if err != nil {
			return relayRun{}, err
		}
		p := &system.Process{
			Name: fmt.Sprintf("%s-%d", name, i),
			Bin:  filepath.Join(e.cfg.BinDir, "order"),
			Args: []string{"relay"},
			Env: []string{
				"ORDER_DATABASE_URL=" + dbURL, "AMQP_URL=" + amqpURL, "HTTP_ADDR=" + addr,
				"RELAY_PARTITIONS=" + strconv.Itoa(parts), "RELAY_LOCK_RETRY=100ms", "LOG_LEVEL=warn",
			},
			Addr: addr,
		}
		p.Env = append(p.Env, e.cfg.RelayEnv...)
		if err := p.Start(); err != nil {
			return relayRun{}, err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := p.WaitReady(rctx)
		cancel()
		if err != nil {
			return relayRun{}, err
		}
	}

	const unpublished = `SELECT count(*) FROM outbox WHERE published_at IS NULL`
	if left, err := count(ctx, pool, unpublished); err != nil || left != rows {
		return relayRun{}, fmt.Errorf("the relays published before the gate opened (%d of %d rows left, %v)", left, rows, err)
	}
	procsCPU := func() time.Duration {
		var total time.Duration
		for _, p := range ps {
			if d, err := processCPU(p.PID()); err == nil {
				total += d
			}
		}
		return total
	}
	relay0, broker0 := procsCPU(), brokerCPU()
	db0, err := backendsCPU(ctx, pool)
	if err != nil {
		return relayRun{}, err
	}
	start := time.Now()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock_shared($1::int, 0)`, relayMemberClass); err != nil {
		return relayRun{}, err
	}
	deadline := start.Add(time.Duration(rows/50+60) * time.Second) // a relay slower than 50 rows/s is broken
	for {
		time.Sleep(20 * time.Millisecond)
		left, err := count(ctx, pool, unpublished)
		if err != nil {
			return relayRun{}, err
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return relayRun{}, fmt.Errorf("published %d of %d rows before the deadline", rows-left, rows)
		}
	}
	run := relayRun{rate: float64(rows) / time.Since(start).Seconds()}
	db1, err := backendsCPU(ctx, pool)
	if err != nil {
		return relayRun{}, err
	}
	perEvent := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(rows) }
	run.relayMs, run.dbMs, run.brokerMs = perEvent(procsCPU()-relay0), perEvent(db1-db0), perEvent(brokerCPU()-broker0)
	for _, p := range ps {
		_ = p.Stop(10 * time.Second)
	}
	ps = nil
	run.disordered, run.duplicates, err = checkQueueOrder(ctx, amqpURL, rows)
	return run, err
}

// checkQueueOrder reads stock.events until it has want distinct events
// and the queue is empty, and counts the orders whose events first arrived
// out of version order (placed v2 before cancelled v3; later copies are
// duplicates a consumer's inbox skips) and the duplicates.
func checkQueueOrder(ctx context.Context, amqpURL string, want int) (disordered, duplicates int, err error) {
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, 0, err
	}
	if err := ch.Qos(2000, 0, false); err != nil {
		return 0, 0, err
	}
	in, err := ch.Consume(contracts.QueueStock, "", true, false, false, false, nil)
	if err != nil {
		return 0, 0, err
	}
	seen := make(map[string]bool, want)
	highest := make(map[string]int, want/2)
	bad := map[string]bool{}
	for {
		select {
		case d := <-in:
			if seen[d.MessageId] {
				duplicates++
				continue
			}
			seen[d.MessageId] = true
			order, version, err := orderOf(d.Body)
			if err != nil {
				return 0, 0, err
			}
			if version < highest[order] && !bad[order] {
				bad[order] = true
				disordered++
			}
			highest[order] = max(highest[order], version)
		case <-time.After(2 * time.Second):
			if len(seen) < want {
				return 0, 0, fmt.Errorf("the queue holds %d of %d events", len(seen), want)
			}
			return disordered, duplicates, nil
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
}

// runRelay runs one relay (in this process) on the outbox at dbURL until
// every row is published or limit (when > 0) has passed, and returns the
// published rows per second and their number. mode "one-at-a-time" wraps
// its publisher in oneAtATime; opts configure the relay. The clock starts
// when the relay starts, so it includes joining and taking the partition.
func (e *env) runRelay(ctx context.Context, dbURL, amqpURL string, mode string, limit time.Duration, opts ...outbox.RelayOption) (float64, int, error) {
	pool, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	conn, err := amqp.Dial(ctx, amqpURL, shopTopology(), e.logger)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = conn.Close() }()
	newPublisher := func() outbox.Publisher {
		pub := outbox.AMQPPublisher(amqp.NewPublisher(conn, contracts.Exchange))
		if mode == "one-at-a-time" {
			return oneAtATime{pub}
		}
		return pub
	}
	relay, err := outbox.NewRelay(pool, newPublisher, outbox.RelayConfig{}, e.logger, metrics.NewRegistry(), opts...)
	if err != nil {
		return 0, 0, err
	}
	const unpublished = `SELECT count(*) FROM outbox WHERE published_at IS NULL`
	total, err := count(ctx, pool, unpublished)
	if err != nil {
		return 0, 0, err
	}

	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- relay.Run(rctx) }()

	// Generous: a relay slower than 50 rows/s is broken, not slow.
	deadline := start.Add(time.Duration(total/50+30) * time.Second)
	var elapsed time.Duration
	for {
		time.Sleep(20 * time.Millisecond)
		left, err := count(ctx, pool, unpublished)
		if err != nil {
			return 0, 0, err
		}
		now := time.Now()
		if left == 0 {
			elapsed = now.Sub(start)
			break
		}
		if limit > 0 && now.Sub(start) >= limit {
			break // elapsed is taken when the relay is told to stop
		}
		if now.After(deadline) {
			return 0, 0, fmt.Errorf("relay published %d of %d rows before the deadline", total-left, total)
		}
	}
	if elapsed == 0 {
		elapsed = time.Since(start)
	}
	stop()
	if err := <-done; err != nil {
		return 0, 0, err
	}
	// The relay marks what was confirmed before it stopped; count that.
	left, err := count(ctx, pool, unpublished)
	if err != nil {
		return 0, 0, err
	}
	published := total - left
	if published == 0 {
		return 0, 0, fmt.Errorf("relay published nothing in %s", elapsed)
	}
	return float64(published) / elapsed.Seconds(), published, nil
}

// oneAtATime publishes each message alone and waits for its confirm
// before the next: the slow baseline that the relay's pipelined stream
// replaces. The stream's timeout bounds it; when it is spent, Wait returns
// the messages confirmed so far without an error, which ends the relay's
// transaction there, and the rest waits for the next.
type oneAtATime struct{ outbox.Publisher }

func (o oneAtATime) Stream(ctx context.Context, timeout time.Duration) outbox.Stream {
	return &oneStream{pub: o.Publisher, ctx: ctx, deadline: time.Now().Add(timeout)}
}

type oneStream struct {
	pub       outbox.Publisher
	ctx       context.Context
	deadline  time.Time
	msgs      []amqp.Message
	confirmed int
}

func (s *oneStream) Send(msgs []amqp.Message) { s.msgs = append(s.msgs, msgs...) }
func (s *oneStream) Close()                   {}

func (s *oneStream) Wait(n int) (int, error) {
	for ; s.confirmed < min(n, len(s.msgs)); s.confirmed++ {
		left := time.Until(s.deadline)
		if left <= 0 {
			return s.confirmed, nil
		}
		one := s.pub.Stream(s.ctx, left)
		one.Send(s.msgs[s.confirmed : s.confirmed+1])
		_, err := one.Wait(1)
		one.Close()
		if err != nil {
			return s.confirmed, err
		}
	}
	return s.confirmed, nil
}

// fillOrderPairsSQL inserts, for $2 orders, an order.order.placed.v1 row
// (version 2) one millisecond apart from $1 on, then their
// order.order.cancelled.v1 rows (version 3) in the same order, each with
// the order id as aggregate key and its hash, as the order service
// writes them. The envelopes pass the contract's schema.
const fillOrderPairsSQL = `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, aggregate_key, key_hash)
SELECT e.id, e.name, e.name,
	jsonb_build_object(
		'event_id', e.id::text,
		'event_name', e.name,
		'occurred_at', to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
		'producer', 'order',
		'schema_version', 1,
		'correlation_id', e.order_id::text,
		'payload', jsonb_build_object(
			'order_id', e.order_id::text,
			'customer_id', e.order_id::text,
			'lines', jsonb_build_array(jsonb_build_object('product_id', e.order_id::text, 'quantity', '2.000')),
			'version', e.version)),
	e.at, e.order_id::text, outbox_key_hash(e.order_id::text)
FROM (SELECT g, at, ` + uuidV7SQL + ` AS id,
		md5('bench-order-' || ((g - 1) % $2))::uuid AS order_id,
		CASE WHEN g <= $2 THEN 'order.order.placed.v1' ELSE 'order.order.cancelled.v1' END AS name,
		CASE WHEN g <= $2 THEN 2 ELSE 3 END AS version
	FROM (SELECT g, $1::timestamptz + g * interval '1 millisecond' AS at
		FROM generate_series(1, 2 * $2::bigint) AS g) AS s) AS e`

// fillOrderPairs inserts orders placed-then-cancelled pairs (2 x orders
// rows) and checks one envelope of each kind against the contract.
func fillOrderPairs(ctx context.Context, pool *pgxpool.Pool, base time.Time, orders int) error {
	if _, err := pool.Exec(ctx, fillOrderPairsSQL, base, orders); err != nil {
		return fmt.Errorf("fill outbox with %d order pairs: %w", orders, err)
	}
	v, err := contracts.NewValidator()
	if err != nil {
		return err
	}
	for _, name := range []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled} {
		var body []byte
		if err := pool.QueryRow(ctx, `SELECT envelope::text FROM outbox WHERE event_name = $1 LIMIT 1`, name).Scan(&body); err != nil {
			return fmt.Errorf("read a filled %s row: %w", name, err)
		}
		if err := v.Validate(body); err != nil {
			return fmt.Errorf("filled %s envelope is invalid: %w", name, err)
		}
	}
	return nil
}

// orderOf reads the order id and version of a relayed envelope.
func orderOf(body []byte) (string, int, error) {
	var env struct {
		Payload struct {
			OrderID string `json:"order_id"`
			Version int    `json:"version"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return "", 0, fmt.Errorf("decode a relayed message: %w", err)
	}
	return env.Payload.OrderID, env.Payload.Version, nil
}
