package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

// measureConsumer measures, for DefaultWorkers and then TunedWorkers: the
// raw database limit with that many workers, then the real stock consumer
// (bin/stock serve with STOCK_WORKERS set) draining ConsumerEvents placed
// events, each on a fresh stock database and the consumer on a fresh vhost;
// then the consumer at its default settings (no STOCK_* variable), which is
// compared with the better raw run.
func (e *env) measureConsumer(ctx context.Context) error {
	s := e.cfg.Sizes
	for _, run := range []struct {
		workers int
		vhost   string
	}{{s.DefaultWorkers, "consumer-default"}, {s.TunedWorkers, "consumer-tuned"}} {
		dbURL, err := e.cloneDatabase(ctx, tplStock, "rawdb-w"+strconv.Itoa(run.workers))
		if err != nil {
			return err
		}
		rate, rawCPU, err := rawDBRate(ctx, dbURL, run.workers, s.DBDuration)
		if err != nil {
			return fmt.Errorf("raw database, %d workers: %w", run.workers, err)
		}
		name := rawDBName(run.workers)
		e.results.set(name, rate, fmt.Sprintf("%d workers for %s: key insert + one reservation insert per transaction", run.workers, s.DBDuration))
		e.progress("   %-28s %10.0f tx/s", name, rate)
		e.results.set(cpuRawName(run.workers), rawCPU.ms(), "CPU per transaction: "+rawCPU.String())
		e.progress("   %-28s %10.3f ms CPU per tx (%s)", cpuRawName(run.workers), rawCPU.ms(), rawCPU)

		dbURL, err = e.cloneDatabase(ctx, tplStock, "consumer-w"+strconv.Itoa(run.workers))
		if err != nil {
			return err
		}
		amqpURL, err := e.vhostURL(run.vhost)
		if err != nil {
			return err
		}
		var stockCPU cpuSplit
		rate, stockCPU, err = e.runConsumer(ctx, stockBin, dbURL, amqpURL, run.workers, s.ConsumerEvents, nil)
		if err2 := emptyVhost(amqpURL); err2 != nil {
			e.progress("   %v", err2)
		}
		if err != nil {
			return fmt.Errorf("stock consumer, %d workers: %w", run.workers, err)
		}
		name = consumerName(run.workers)
		e.results.set(name, rate, fmt.Sprintf("bin/stock, STOCK_WORKERS=%d, %d queued placed events of one line", run.workers, s.ConsumerEvents))
		e.progress("   %-28s %10.0f events/s", name, rate)
		e.results.set(cpuStockName(run.workers), stockCPU.ms(), "CPU per event: "+stockCPU.String())
		e.progress("   %-28s %10.3f ms CPU per event (%s)", cpuStockName(run.workers), stockCPU.ms(), stockCPU)
	}
	// The consumer at its defaults: no STOCK_* setting at all.
	dbURL, err := e.cloneDatabase(ctx, tplStock, "consumer-defaults")
	if err != nil {
		return err
	}
	amqpURL, err := e.vhostURL("consumer-defaults")
	if err != nil {
		return err
	}
	rate, stockCPU, err := e.runConsumer(ctx, stockBin, dbURL, amqpURL, 0, s.ConsumerEvents, nil)
	if err2 := emptyVhost(amqpURL); err2 != nil {
		e.progress("   %v", err2)
	}
	if err != nil {
		return fmt.Errorf("stock consumer, default settings: %w", err)
	}
	e.results.set(consumerDefaultsName, rate, fmt.Sprintf("bin/stock with no STOCK_* setting, %d queued placed events of one line", s.ConsumerEvents))
	e.progress("   %-28s %10.0f events/s", consumerDefaultsName, rate)
	e.results.set(cpuStockDefaultsName, stockCPU.ms(), "CPU per event: "+stockCPU.String())
	e.progress("   %-28s %10.3f ms CPU per event (%s)", cpuStockDefaultsName, stockCPU.ms(), stockCPU)

	// The ceiling of a one-transaction-per-event consumer is the better of the
	// two raw runs; the consumer is measured at its default settings.
	if ceiling := e.rawCeiling(); ceiling > 0 {
		e.results.set("stock_consumer_vs_db_ceiling", rate/ceiling, fmt.Sprintf(
			"%s / the better of %s and %s", consumerDefaultsName, rawDBName(s.DefaultWorkers), rawDBName(s.TunedWorkers)))
		e.progress("   %-28s %10.2f x", "stock_consumer_vs_db_ceiling", rate/ceiling)
	}
	if err := e.measureShipping(ctx); err != nil {
		return err
	}
	return e.measureTracedConsumer(ctx)
}

// consumerBin is a service whose consumer a run drains: its binary (and the
// prefix of its variables), its queue, and the statement that counts the
// effects of the placed events processed since $1.
type consumerBin struct{ name, queue, effects, effectName string }

var (
	stockBin    = consumerBin{"stock", contracts.QueueStock, `SELECT count(*) FROM reservation WHERE created_at >= $1`, "reservations"}
	shippingBin = consumerBin{"shipping", contracts.QueueShipping, `SELECT count(*) FROM shipment WHERE created_at >= $1`, "shipments"}
)

// measureShipping drains ConsumerEvents placed events with bin/shipping at
// its default settings, on a fresh shipping database and vhost: its rate and
// its CPU time per event, against the stock consumer's at its defaults.
func (e *env) measureShipping(ctx context.Context) error {
	dbURL, err := e.cloneDatabase(ctx, tplShipping, "shipping-defaults")
	if err != nil {
		return err
	}
	amqpURL, err := e.vhostURL("shipping-defaults")
	if err != nil {
		return err
	}
	n := e.cfg.Sizes.ConsumerEvents
	rate, cpu, err := e.runConsumer(ctx, shippingBin, dbURL, amqpURL, 0, n, nil)
	if err2 := emptyVhost(amqpURL); err2 != nil {
		e.progress("   %v", err2)
	}
	if err != nil {
		return fmt.Errorf("shipping consumer, default settings: %w", err)
	}
	e.results.set(shippingDefaultsName, rate, fmt.Sprintf("bin/shipping with no SHIPPING_* setting, %d queued placed events", n))
	e.progress("   %-28s %10.0f events/s", shippingDefaultsName, rate)
	e.results.set(cpuShippingDefaultsName, cpu.ms(), "CPU per event: "+cpu.String())
	e.progress("   %-28s %10.3f ms CPU per event (%s)", cpuShippingDefaultsName, cpu.ms(), cpu)
	if ceiling := e.rawCeiling(); ceiling > 0 {
		e.results.set("shipping_consumer_vs_db_ceiling", rate/ceiling, shippingDefaultsName+
			" / the better raw run (a key and one insert per transaction; shipping writes a key and two rows per event)")
		e.progress("   %-28s %10.2f x", "shipping_consumer_vs_db_ceiling", rate/ceiling)
	}
	return nil
}

// rawCeiling is the better rate of the two raw runs: the ceiling of a consumer
// that commits one transaction per event; 0 before they ran.
func (e *env) rawCeiling() float64 {
	s := e.cfg.Sizes
	raw1, _ := e.results.get(rawDBName(s.DefaultWorkers))
	raw2, _ := e.results.get(rawDBName(s.TunedWorkers))
	return max(raw1, raw2)
}

// cpuSplit is CPU time per event (or transaction), split between the client
// process and its PostgreSQL server processes. The broker's share is not in
// the total (ms): the broker is shared with other work on the machine. When
// the broker runs on this machine its CPU time over the stock run is given
// beside it (broker, 0 when unknown), an upper bound of what delivering and
// settling the events cost it.
type cpuSplit struct{ client, db, broker time.Duration }

func (c cpuSplit) ms() float64 { return float64(c.client+c.db) / float64(time.Millisecond) }

func (c cpuSplit) String() string {
	s := fmt.Sprintf("client %.3f ms + PostgreSQL %.3f ms", float64(c.client)/1e6, float64(c.db)/1e6)
	if c.broker > 0 {
		s += fmt.Sprintf("; broker, shared: %.3f ms", float64(c.broker)/1e6)
	}
	return s
}

// brokerCPU returns the CPU time used so far by the local RabbitMQ node (the
// oldest beam.smp process), or 0 when there is none.
func brokerCPU() time.Duration {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	oldest := 0
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || (oldest != 0 && pid > oldest) {
			continue
		}
		if comm, err := os.ReadFile("/proc/" + d.Name() + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "beam.smp" {
			oldest = pid
		}
	}
	if oldest != 0 {
		if cpu, err := processCPU(oldest); err == nil {
			return cpu
		}
	}
	return 0
}

// rawDBRate runs workers goroutines for d, each repeating the bare minimum
// of a consumer's transaction on the stock schema: BEGIN, insert a
// processed_event key, insert one reservation row, COMMIT. It returns
// transactions per second.
func rawDBRate(ctx context.Context, dbURL string, workers int, d time.Duration) (float64, cpuSplit, error) {
	var cpu cpuSplit
	dbURL, err := withParam(dbURL, "pool_max_conns", strconv.Itoa(workers))
	if err != nil {
		return 0, cpu, err
	}
	pool, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return 0, cpu, err
	}
	defer pool.Close()
	// Open every connection before the clock starts.
	conns := make([]*pgxpool.Conn, 0, workers)
	for range workers {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return 0, cpu, err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	var wg sync.WaitGroup
	counts := make([]int, workers)
	errs := make([]error, workers)
	monitor, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return 0, cpu, err
	}
	defer monitor.Close()
	dbBefore, err := backendsCPU(ctx, monitor)
	if err != nil {
		return 0, cpu, err
	}
	clientBefore := selfCPU()
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if err := rawTx(ctx, pool); err != nil {
					errs[w] = err
					return
				}
				counts[w]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	client := selfCPU() - clientBefore
	for _, err := range errs {
		if err != nil {
			return 0, cpu, err // the workers fail alike; one error says it
		}
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	dbAfter, err := backendsCPU(ctx, monitor)
	if err != nil {
		return 0, cpu, err
	}
	if total > 0 {
		cpu = cpuSplit{client: client / time.Duration(total), db: (dbAfter - dbBefore) / time.Duration(total)}
	}
	return float64(total) / elapsed.Seconds(), cpu, nil
}

// rawTx is one transaction of the raw database limit: the inbox key insert and
// one single-row insert into stock's order_status, as a placed event's handler
// starts with, committed on its own.
func rawTx(ctx context.Context, pool *pgxpool.Pool) error {
	eventID, err := uuid.NewV7()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(eventID[:]) // stands for the content hash the inbox stores
	return pg.WithTx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO processed_event (consumer, message_key, payload_sha256, processed_at) VALUES ($1, $2, $3, now()) ON CONFLICT DO NOTHING`,
			stockConsumer, eventID.String(), sum[:]); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO order_status (order_id, status, version) VALUES ($1, 'placed', 2)`, uuid.New())
		return err
	})
}

// runConsumer queues n placed events (one line each) on svc's queue of the
// vhost at amqpURL, then starts bin/<svc> serve with <SVC>_WORKERS=workers
// (unset when workers is 0: its default) on the database at dbURL, waits
// until it has processed all of them and checks that each had its effect.
// The rate is taken from the processed_at times of the new processed_event
// keys, (n-1) / (last - first), so the process's start-up does not count; the
// CPU time per event is the process's and its PostgreSQL sessions'.
func (e *env) runConsumer(ctx context.Context, svc consumerBin, dbURL, amqpURL string, workers, n int, tracing []string) (float64, cpuSplit, error) {
	var cpu cpuSplit
	if err := queueEvents(ctx, amqpURL, svc.queue, n, e, tracing != nil); err != nil {
		return 0, cpu, err
	}
	pool, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return 0, cpu, err
	}
	defer pool.Close()
	var since time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&since); err != nil {
		return 0, cpu, err
	}
	addr, err := testkit.FreeAddr()
	if err != nil {
		return 0, cpu, err
	}
	prefix := strings.ToUpper(svc.name) + "_"
	p := &system.Process{
		Name: svc.name,
		Bin:  filepath.Join(e.cfg.BinDir, svc.name),
		Args: []string{"serve"},
		Env: []string{
			prefix + "DATABASE_URL=" + dbURL,
			"AMQP_URL=" + amqpURL,
			"HTTP_ADDR=" + addr,
			"LOG_LEVEL=warn",
			"OTEL_SDK_DISABLED=" + strconv.FormatBool(tracing == nil),
		},
		Addr: addr,
	}
	if workers > 0 {
		p.Env = append(p.Env, prefix+"WORKERS="+strconv.Itoa(workers))
	}
	if svc == stockBin {
		p.Env = append(p.Env, e.cfg.StockEnv...)
	}
	p.Env = append(p.Env, tracing...)
	brokerBefore := brokerCPU()
	if err := p.Start(); err != nil {
		return 0, cpu, err
	}
	defer func() { _ = p.Stop(10 * time.Second) }()

	// Generous: a consumer slower than 50 events/s is broken, not slow.
	deadline := time.Now().Add(time.Duration(n/50+30) * time.Second)
	for {
		var done int
		var first, last *time.Time
		if err := pool.QueryRow(ctx, `SELECT count(*), min(processed_at), max(processed_at)
FROM processed_event WHERE processed_at >= $1`, since).Scan(&done, &first, &last); err != nil {
			return 0, cpu, err
		}
		if done >= n {
			span := last.Sub(*first)
			if span <= 0 {
				return 0, cpu, fmt.Errorf("%d events processed in no time", done)
			}
			effects, err := count(ctx, pool, svc.effects, since)
			if err != nil {
				return 0, cpu, err
			}
			if effects != n {
				return 0, cpu, fmt.Errorf("%d %s for %d events", effects, svc.effectName, n)
			}
			clientCPU, err := processCPU(p.PID())
			if err != nil {
				return 0, cpu, err
			}
			dbCPU, err := backendsCPU(ctx, pool)
			if err != nil {
				return 0, cpu, err
			}
			cpu = cpuSplit{client: clientCPU / time.Duration(n), db: dbCPU / time.Duration(n)}
			if brokerBefore > 0 {
				cpu.broker = (brokerCPU() - brokerBefore) / time.Duration(n)
			}
			return float64(done-1) / span.Seconds(), cpu, nil
		}
		if !p.Running() {
			return 0, cpu, fmt.Errorf("bin/%s exited after %d of %d events:\n%s", svc.name, done, n, p.Output())
		}
		if time.Now().After(deadline) {
			return 0, cpu, fmt.Errorf("bin/%s processed %d of %d events before the deadline:\n%s", svc.name, done, n, p.Output())
		}
		select {
		case <-ctx.Done():
			return 0, cpu, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// queueEvents publishes n placed events straight to queue, with confirms, after
// declaring the default topology: through the queue's copies exchange, each
// carrying the origin a relay's message has (app.events, the user of amqpURL),
// as a retried copy would (docs/architecture.md, rule 8); traced ones carry a
// sampled traceparent of a trace of their own, as the relay would send it.
func queueEvents(ctx context.Context, amqpURL, queue string, n int, e *env, traced bool) error {
	msgs, err := placedMessages(n)
	if err != nil {
		return err
	}
	uri, err := amqp091.ParseURI(amqpURL)
	if err != nil {
		return err
	}
	origin := amqp.Origin{Exchange: contracts.Exchange, UserID: uri.Username}
	for i := range msgs {
		msgs[i].Headers = amqp091.Table{}
		origin.Stamp(msgs[i].Headers)
		if traced {
			msgs[i].Headers[contracts.HeaderTraceparent] = randomTraceparent()
		}
	}
	conn, err := amqp.Dial(ctx, amqpURL, shopTopology(), e.logger)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	pub := amqp.NewPublisher(conn, amqp.CopiesExchange(queue))
	defer func() { _ = pub.Close() }()
	for i := range msgs {
		msgs[i].RoutingKey = queue
	}
	for off := 0; off < len(msgs); off += 1000 {
		if _, err := pub.PublishBatch(ctx, msgs[off:min(off+1000, len(msgs))], 30*time.Second); err != nil {
			return fmt.Errorf("queue placed events: %w", err)
		}
	}
	return nil
}
