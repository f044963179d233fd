// Package bench measures what the shop's reliability costs on one machine:
// the raw broker and database limits, the outbox relay (one confirm at a
// time, then partitioned relay processes), the
// stock consumer, end-to-end latency and how throughput changes as the
// outbox and processed_event tables grow. `make bench` runs it through
// e2e/cmd/bench; docs/performance.md explains every measurement.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sizes are the amounts of work of one run. DefaultSizes is the documented
// run; QuickSizes is a smoke run of a few seconds per measurement.
type Sizes struct {
	// BrokerMessages is the number of persistent messages published per
	// broker measurement.
	BrokerMessages int
	// BrokerBatch is the confirm window of one publisher: it streams its
	// messages with at most this many unconfirmed (half sent, then the half
	// before confirmed), as the relay streams its batches.
	BrokerBatch int
	// BrokerPublishers is the number of parallel publishers (each on its own
	// connection) of the second broker measurement; the first uses one.
	BrokerPublishers int

	// RelayRows is the number of unpublished rows the outbox holds before
	// each relay mode starts.
	RelayRows int
	// OneAtATimeLimit bounds the one-confirm-at-a-time relay run; its rate
	// is measured over the rows it published in that time.
	OneAtATimeLimit time.Duration

	// DBDuration is how long each raw database measurement runs.
	DBDuration time.Duration
	// ConsumerEvents is the number of placed events queued before each stock
	// consumer run.
	ConsumerEvents int
	// DefaultWorkers is bin/stock's default STOCK_WORKERS.
	DefaultWorkers int
	// TunedWorkers is the second STOCK_WORKERS setting measured.
	TunedWorkers int

	// LatencyRate is the steady rate of order placements, per second.
	LatencyRate int
	// LatencyDuration is how long orders are placed at LatencyRate.
	LatencyDuration time.Duration
	// MaxRates are the rising steady rates (orders per second) of the search
	// for the highest rate at which p99 stays under 100 ms.
	MaxRates []int
	// MaxRateDuration is how long orders are placed at each of MaxRates.
	MaxRateDuration time.Duration

	// GrowthRows are the table sizes (rows already present) of the
	// cost-growth measurements, smallest first.
	GrowthRows []int
	// GrowthRelayRows is the number of unpublished rows the relay drains at
	// each growth step.
	GrowthRelayRows int
	// GrowthConsumerEvents is the number of events the consumer drains at
	// each growth step.
	GrowthConsumerEvents int
}

// DefaultSizes returns the sizes of `make bench`: about five to seven
// minutes on a 2-core machine.
func DefaultSizes() Sizes {
	return Sizes{
		BrokerMessages:       100_000,
		BrokerBatch:          1000,
		BrokerPublishers:     4,
		RelayRows:            50_000,
		OneAtATimeLimit:      10 * time.Second,
		DBDuration:           5 * time.Second,
		ConsumerEvents:       20_000,
		DefaultWorkers:       32,
		TunedWorkers:         64,
		LatencyRate:          200,
		LatencyDuration:      30 * time.Second,
		MaxRates:             []int{25, 50, 75, 100, 150, 200, 250, 300, 400, 500, 600, 800, 1000},
		MaxRateDuration:      10 * time.Second,
		GrowthRows:           []int{10_000, 100_000, 1_000_000},
		GrowthRelayRows:      20_000,
		GrowthConsumerEvents: 10_000,
	}
}

// QuickSizes returns the sizes of `bench -quick`: every measurement runs,
// on small amounts, to check that the bench works; its numbers mean little.
func QuickSizes() Sizes {
	return Sizes{
		BrokerMessages:       2000,
		BrokerBatch:          500,
		BrokerPublishers:     2,
		RelayRows:            2000,
		OneAtATimeLimit:      2 * time.Second,
		DBDuration:           500 * time.Millisecond,
		ConsumerEvents:       500,
		DefaultWorkers:       32,
		TunedWorkers:         16,
		LatencyRate:          50,
		LatencyDuration:      time.Second,
		MaxRates:             []int{25, 50},
		MaxRateDuration:      time.Second,
		GrowthRows:           []int{1000, 2000, 4000},
		GrowthRelayRows:      1000,
		GrowthConsumerEvents: 300,
	}
}

// Validate reports a size that cannot work.
func (s Sizes) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("bench: %s is %d, must be positive", name, v))
		}
	}
	positive("BrokerMessages", s.BrokerMessages)
	positive("BrokerBatch", s.BrokerBatch)
	positive("BrokerPublishers", s.BrokerPublishers)
	positive("RelayRows", s.RelayRows)
	positive("ConsumerEvents", s.ConsumerEvents)
	positive("DefaultWorkers", s.DefaultWorkers)
	positive("TunedWorkers", s.TunedWorkers)
	positive("LatencyRate", s.LatencyRate)
	positive("GrowthRelayRows", s.GrowthRelayRows)
	positive("GrowthConsumerEvents", s.GrowthConsumerEvents)
	if s.ConsumerEvents < 2 || s.GrowthConsumerEvents < 2 {
		errs = append(errs, errors.New("bench: consumer runs need at least 2 events"))
	}
	for i, r := range s.MaxRates {
		if r <= 0 || (i > 0 && r <= s.MaxRates[i-1]) {
			errs = append(errs, fmt.Errorf("bench: MaxRates %v must be positive and increasing", s.MaxRates))
			break
		}
	}
	if len(s.MaxRates) == 0 || s.MaxRateDuration <= 0 {
		errs = append(errs, errors.New("bench: MaxRates and MaxRateDuration must be set"))
	}
	if s.OneAtATimeLimit <= 0 || s.DBDuration <= 0 || s.LatencyDuration <= 0 {
		errs = append(errs, errors.New("bench: durations must be positive"))
	}
	if s.BrokerPublishers < 2 {
		errs = append(errs, errors.New("bench: BrokerPublishers must be at least 2 (the single publisher is measured anyway)"))
	}
	if s.DefaultWorkers == s.TunedWorkers {
		errs = append(errs, errors.New("bench: TunedWorkers must differ from DefaultWorkers"))
	}
	if len(s.GrowthRows) < 2 {
		errs = append(errs, errors.New("bench: GrowthRows needs at least two sizes"))
	}
	for i, n := range s.GrowthRows {
		if n <= 0 || (i > 0 && n <= s.GrowthRows[i-1]) {
			errs = append(errs, fmt.Errorf("bench: GrowthRows %v must be positive and increasing", s.GrowthRows))
			break
		}
	}
	return errors.Join(errs...)
}

// Config says which servers and binaries a run uses.
type Config struct {
	// DatabaseURL names the PostgreSQL server (any database on it); the
	// bench creates and drops its own databases there, named bench_<run>_*.
	DatabaseURL string
	// AMQPURL names the RabbitMQ broker; the bench creates and deletes its
	// own vhosts there, named bench-<run>-*, through the management API
	// when it answers on port 15672, else with rabbitmqctl on this machine.
	AMQPURL string
	// BinDir holds the order, stock and shipping binaries (`make build`).
	BinDir string
	// Sizes is the amount of work.
	Sizes Sizes
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// Logger receives the warnings of the in-process relay; nil discards.
	Logger *slog.Logger
	// Only, when not empty, limits the run to these steps (see Steps).
	Only []string
	// StockEnv is added to the environment of every bin/stock the consumer
	// and growth steps start (KEY=VALUE), to try settings other than the
	// defaults; empty measures the defaults.
	StockEnv []string
	// RelayEnv is added to the environment of every relay process the relay,
	// latency and maxrate steps start (KEY=VALUE: RELAY_NOTIFY_GATHER=5ms, say).
	RelayEnv []string
}

// Steps returns the keys of the run's steps, in run order: "broker",
// "relay", "consumer", "latency", "maxrate" and "growth".
func Steps() []string { return []string{"broker", "relay", "consumer", "latency", "maxrate", "growth"} }

// Run performs every measurement once, in order, and returns their results
// in the order of Names. A measurement that fails is reported in the
// returned error (joined with the others) and the run goes on with the next
// one, so the results may be partial when err != nil. Everything the run
// creates (databases, vhosts, processes) is removed before it returns,
// also when ctx ends.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.Sizes.Validate(); err != nil {
		return nil, err
	}
	for _, k := range cfg.Only {
		if !slices.Contains(Steps(), k) {
			return nil, fmt.Errorf("bench: unknown step %q, want one of %v", k, Steps())
		}
	}
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()

	steps := []struct {
		key, name string
		fn        func(context.Context) error
	}{
		{"broker", "raw broker limit", e.measureBroker},
		{"relay", "relay: one confirm at a time, then partitions x processes", e.measureRelay},
		{"consumer", "raw database limit and stock consumer", e.measureConsumer},
		{"latency", "end-to-end latency", e.measureLatency},
		{"maxrate", "highest steady rate with p99 < 100 ms", e.measureMaxRate},
		{"growth", "cost growth", e.measureGrowth},
	}
	if load, ok := LoadAverage(); ok && load > float64(runtime.NumCPU()) {
		e.progress("!! load average %.1f on %d CPUs: other work is running, the numbers will be low", load, runtime.NumCPU())
	}
	var errs []error
	for _, s := range steps {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, s.key) {
			continue
		}
		start := time.Now()
		e.progress("== %s", s.name)
		if err := s.fn(ctx); err != nil {
			e.progress("   FAILED: %v", err)
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			continue
		}
		e.progress("   done in %s", time.Since(start).Round(100*time.Millisecond))
	}
	return e.results.ordered(cfg.Sizes), errors.Join(errs...)
}

// LoadAverage returns the one-minute load average of this machine from
// /proc/loadavg, and false where that file does not exist. Numbers
// measured while it is above the number of CPUs are not comparable.
func LoadAverage() (float64, bool) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return v, err == nil
}
