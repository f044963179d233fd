// Package chaos is the cluster topology of `make chaos` (TOPOLOGY=cluster) and
// of the drill TestFaultChaosCluster: the whole saga (two order APIs, two
// order relays and two stock relays with RELAY_PARTITIONS outbox partitions,
// two stock and two shipping processes) on a private three-node RabbitMQ
// cluster, each node on a host of its own (fault.Hosts), and on a PostgreSQL
// primary with a synchronous standby (fault.PGCluster), under a steady load of
// orders on products of limited stock, while a seeded nemesis raises
// overlapping faults on the broker hosts, the database and the processes. Every
// fault heals; then the ledger (docs/reliability.md, "Chaos on the cluster").
//
// It needs root (network namespaces) and the binaries of `make build`.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/fault"
	"example.com/shop/e2e/internal/system"
)

// Options is one run of the cluster topology.
type Options struct {
	Seed   uint64        // picks the faults, their targets, holds and gaps; the same seed, the same sequence per lane
	Orders int           // the load stops after this many orders placed (0: when the faults end)
	Faults time.Duration // how long the nemesis raises faults (0: until the load is done)
	Rate   int           // orders per second the load aims at
	BinDir string        // the order, stock and shipping binaries
	Log    io.Writer     // the processes' output (nil: kept in memory)
	Out    io.Writer     // the fault table and the ledger
	// Async replicates asynchronously: a failover may then lose commits the
	// clients saw acknowledged, which the ledger reports as missing orders.
	Async bool
}

// settle bounds the wait for the system to drain once the faults are healed.
const settle = 5 * time.Minute

// healthy bounds the wait for the broker cluster or the database cluster to be
// whole again after a fault.
const healthy = 3 * time.Minute

// restartWait bounds the wait for a process killed and started again to be ready.
const restartWait = 3 * time.Minute

// partitions is RELAY_PARTITIONS of both relays.
const partitions = 4

// Result is what a run saw: the ledger, the faults raised and the load's figures.
type Result struct {
	Seed         uint64
	Ledger       fault.Ledger
	Faults       map[string]int // faults raised, by kind
	Overlapping  int            // faults raised while another was held
	Placed       int            // orders the load saw placed
	Cancelled    int            // of them, cancelled by the load afterwards
	Waiting      int            // orders still placed (no answer) after settling
	Missing      int            // orders acknowledged placed (or created) that the order database does not hold
	Oversold     int            // samples with a product reserving more than it has on hand
	Samples      int            // samples of product_stock read during the run
	Reserved     string         // units reserved on the tracked products, after settling
	Confirmed    string         // units of the tracked products in confirmed orders, after settling
	LoadErrors   int            // requests of the load that failed and were retried
	Repairs      []string       // faults that did not heal by themselves and how they were healed
	FaultErrors  []string       // faults that could not be raised or lifted
	NotReadySoon []string       // processes not ready within restartWait of a restart (the ledger checks them at the end)
	Took         time.Duration
}

// Total is the number of faults raised.
func (r Result) Total() int {
	n := 0
	for _, v := range r.Faults {
		n += v
	}
	return n
}

// Failures lists what is wrong: the ledger's failures, acknowledged orders
// missing, orders waiting, oversold samples, reserved units other than the
// confirmed ones, faults that could not be raised or lifted.
func (r Result) Failures() []string {
	f := r.Ledger.Failures(nil)
	if r.Missing > 0 {
		f = append(f, fmt.Sprintf("%d orders acknowledged and gone", r.Missing))
	}
	if r.Waiting > 0 {
		f = append(f, fmt.Sprintf("%d orders still waiting for stock's answer", r.Waiting))
	}
	if r.Oversold > 0 {
		f = append(f, fmt.Sprintf("%d samples with a product oversold", r.Oversold))
	}
	if r.Reserved != r.Confirmed {
		f = append(f, fmt.Sprintf("%s units reserved, but confirmed orders hold %s", r.Reserved, r.Confirmed))
	}
	for _, e := range r.FaultErrors {
		f = append(f, "fault: "+e)
	}
	return f
}

// run is one run in progress.
type run struct {
	opts   Options
	hosts  *fault.Hosts
	nodes  []*fault.Node
	pg     *fault.PGCluster
	rig    *fault.Rig
	start  time.Time
	outMu  sync.Mutex
	active atomic.Int32

	mu       sync.Mutex
	res      Result
	busy     map[string]bool // processes a fault holds
	products []string
}

// Cluster runs the cluster topology with opts and returns what it saw. The
// error is non-nil when the topology could not be set up or the ledger could
// not be read; a broken invariant is in Result.Failures.
func Cluster(ctx context.Context, opts Options) (Result, error) {
	r := &run{opts: opts, busy: map[string]bool{}, res: Result{Seed: opts.Seed, Faults: map[string]int{}}}
	if opts.Rate < 1 {
		return r.res, errors.New("chaos: the rate must be positive")
	}
	if opts.Orders <= 0 && opts.Faults <= 0 {
		return r.res, errors.New("chaos: give a number of orders, a time of faults, or both")
	}
	defer r.close()
	if err := r.setUp(ctx); err != nil {
		return r.res, err
	}
	repl := "synchronous"
	if opts.Async {
		repl = "asynchronous"
	}
	r.printf("chaos: cluster of 3 RabbitMQ nodes %v, PostgreSQL primary :%d with %s standby :%d, %d processes, RELAY_PARTITIONS=%d\n",
		nodeNames(r.nodes), r.pg.Primary.Port, repl, r.pg.Standby.Port, len(r.rig.Sys.All()), partitions)
	r.start = time.Now()

	sctx, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() { r.sample(sctx) })

	lctx, stopLoad := context.WithCancel(ctx)
	load := r.startLoad(lctx)

	nctx, stopNemesis := context.WithCancel(ctx)
	if opts.Faults > 0 {
		var cancel context.CancelFunc
		nctx, cancel = context.WithTimeout(nctx, opts.Faults)
		defer cancel()
	}
	var lanes sync.WaitGroup
	for i, l := range laneSpecs() {
		rng := rand.New(rand.NewPCG(opts.Seed, uint64(i+1)))
		lanes.Go(func() { r.lane(nctx, l, rng) })
	}
	r.printf("\n%-9s %-9s %-18s %-44s %s\n", "time", "lane", "fault", "target", "held")
	if opts.Orders > 0 {
		select {
		case <-load.done:
		case <-ctx.Done():
		}
		if opts.Faults <= 0 {
			stopNemesis()
		}
	} else {
		<-nctx.Done()
	}
	lanes.Wait() // every fault lifted
	stopNemesis()
	<-nctx.Done()
	if opts.Orders > 0 && opts.Faults > 0 { // the faults ended first: the load goes on to its count
		select {
		case <-load.done:
		case <-ctx.Done():
		}
	}
	stopLoad()
	load.wg.Wait()
	if ctx.Err() != nil {
		stopSampling()
		return r.res, ctx.Err()
	}
	r.printf("\nchaos: faults over after %s (%d raised, %d while another was held), %d orders placed; waiting for the clusters and up to %s for the system to settle\n",
		fmtDur(time.Since(r.start)), r.res.Total(), r.res.Overlapping, r.rig.Placed(), settle)
	if err := r.brokerWhole(ctx, "after the run"); err != nil {
		r.faultError("broker after the run: %v", err)
	}
	if err := r.pg.Healthy(ctx, healthy); err != nil {
		r.faultError("database after the run: %v", err)
	}
	l, err := r.rig.Ledger(ctx, settle, nil)
	stopSampling()
	sampler.Wait()
	if err != nil {
		return r.res, err
	}
	r.res.Ledger, r.res.Took = l, time.Since(r.start)
	if err := r.finalChecks(ctx); err != nil {
		return r.res, err
	}
	for _, e := range r.pg.Rebuilt {
		r.repaired("pg_rewind failed, the old primary copied afresh (pg_basebackup): %s", strings.Join(strings.Fields(e), " "))
	}
	r.res.Placed, r.res.LoadErrors = r.rig.Placed(), int(load.errors.Load())
	r.res.Cancelled = int(load.cancelled.Load())
	r.report()
	return r.res, nil
}

func (r *run) setUp(ctx context.Context) error {
	var err error
	if r.hosts, err = fault.NewHosts(ctx, 3); err != nil {
		return err
	}
	if r.nodes, err = fault.StartCluster(ctx, r.hosts); err != nil {
		return fmt.Errorf("private RabbitMQ cluster: %w", err)
	}
	if r.pg, err = fault.StartPGCluster(ctx, !r.opts.Async); err != nil {
		return err
	}
	urls := make([]string, len(r.nodes))
	for i, n := range r.nodes {
		urls[i] = n.AMQPURL
	}
	dbs := map[string]string{}
	for _, s := range contracts.Services() {
		dbs[s.Name] = r.pg.URL("chaos_" + strings.ReplaceAll(s.Name, "-", "_"))
	}
	replicas := map[string]int{}
	for _, s := range contracts.Services() {
		replicas[s.Name] = 1
	}
	for _, p := range contracts.Producers() {
		if p.Name != contracts.ProducerOrder { // order's has the standby
			replicas[system.RelayName(p.Name)] = 1
		}
	}
	r.rig, err = fault.New(ctx, fault.Config{
		BinDir:  r.opts.BinDir,
		DBURLs:  dbs,
		AMQPURL: strings.Join(urls, ","),
		Ctl:     r.ctl,
		Vhost:   "/",
		Env: []string{
			"RELAY_POLL_INTERVAL=200ms", fmt.Sprintf("RELAY_PARTITIONS=%d", partitions), "LOG_LEVEL=info",
			"STOCK_MAX_ATTEMPTS=4", "STOCK_RETRY_DELAYS=50ms,100ms,200ms",
			"SHIPPING_MAX_ATTEMPTS=4", "SHIPPING_RETRY_DELAYS=50ms,100ms,200ms",
			"ORDER_MAX_ATTEMPTS=4", "ORDER_RETRY_DELAYS=50ms,100ms,200ms",
		},
		Log:      r.opts.Log,
		Replicas: replicas,
	})
	if err != nil {
		return err
	}
	if err := r.rig.Start(ctx, restartWait); err != nil {
		return err
	}
	return r.stock(ctx)
}

// ctl runs rabbitmqctl on the first node that answers.
func (r *run) ctl(ctx context.Context, args ...string) (string, error) {
	var errs []error
	for _, n := range r.nodes {
		out, err := n.Ctl(ctx, args...)
		if err == nil {
			return out, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

func (r *run) close() {
	if r.rig != nil {
		r.rig.Close()
	}
	if r.pg != nil {
		r.pg.Stop()
	}
	for _, n := range r.nodes {
		_ = n.Signal(syscall.SIGCONT) // a node left frozen would not stop
	}
	for _, n := range r.nodes {
		n.Stop()
	}
	if r.hosts != nil {
		r.hosts.Close()
	}
}

func (r *run) printf(format string, args ...any) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	fmt.Fprintf(r.opts.Out, format, args...)
}

// printLog writes to the processes' log.
func (r *run) printLog(format string, args ...any) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	fmt.Fprintf(r.opts.Log, format, args...)
}

func (r *run) faultError(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.FaultErrors = append(r.res.FaultErrors, fmt.Sprintf(format, args...))
}

func (r *run) repaired(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Repairs = append(r.res.Repairs, fmt.Sprintf(format, args...))
}

func nodeNames(nodes []*fault.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

func fmtDur(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// report prints the ledger.
func (r *run) report() {
	res, l := r.res, r.res.Ledger
	kinds := slicesSortedKeys(res.Faults)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, res.Faults[k]))
	}
	r.printf("\nledger (seed %d, reproduce with CHAOS_SEED=%d)\n", res.Seed, res.Seed)
	r.printf("  took            %s\n  faults          %d of %d kinds, %d overlapping: %s\n", fmtDur(res.Took), res.Total(), len(kinds), res.Overlapping, strings.Join(parts, ", "))
	r.printf("  placed          %d (%d cancelled by the client, %d requests retried)\n", res.Placed, res.Cancelled, res.LoadErrors)
	r.printf("  orders          %v\n", l.Report.Orders)
	r.printf("  waiting         %d\n  missing         %d\n  lost            %d\n  doubled         %d\n  duplicates      %d (recognised by the inboxes)\n", res.Waiting, res.Missing, l.Lost, l.Doubled, l.Duplicates)
	r.printf("  oversold        %d of %d samples\n  units reserved  %s (confirmed orders: %s)\n", res.Oversold, res.Samples, res.Reserved, res.Confirmed)
	r.printf("  dead-lettered   %d (%d not delivered)\n  longest stall   %s\n  not ready       %d\n", l.DeadLetters(), l.NotDelivered, fmtDur(l.LongestStall), len(l.NotReady))
	for _, s := range res.Repairs {
		r.printf("  repaired        %s\n", s)
	}
	for _, s := range res.NotReadySoon {
		r.printf("  slow restart    %s\n", s)
	}
	r.printf("summary: %s\n", l)
}

func slicesSortedKeys(m map[string]int) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
