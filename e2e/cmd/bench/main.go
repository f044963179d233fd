// Command bench measures the shop on the real PostgreSQL and RabbitMQ and
// reports each number beside its baseline: the raw broker and database
// limits, the outbox relay one confirm at a time and as real relay
// processes over 1, 2, 4 and 8 partitions with 1 and 2 processes (with a
// per-order ordering check of what reached the queue), the stock
// consumer, place -> reservation latency with NOTIFY and with polling, and
// throughput as the outbox and processed_event tables grow. `make bench`
// builds the binaries into bin/ and runs it; docs/performance.md explains
// the measurements and shows a run.
//
// It prints a table, writes the results to <out>/latest.json (an array of
// {name, value, unit, baseline, ratio, goal, met, note}) and draws them in
// <out>/chart.svg. It creates its own databases (bench_<run>_*) and vhosts
// (bench-<run>-*, with rabbitmqctl) and removes them at the end. The exit
// code is 1 when a measurement failed; goals that are missed are reported,
// not failed. Flags:
//
//	-quick             small sizes: a smoke run of about a minute
//	-bin DIR           directory of the order, stock and shipping binaries (default bin)
//	-out DIR           where latest.json and chart.svg go (default bench/out)
//	-db URL            PostgreSQL server (default $BENCH_DATABASE_URL or postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
//	-amqp URL          RabbitMQ broker (default $AMQP_URL or amqp://guest:guest@127.0.0.1:5672/)
//	-rate N            orders per second of the latency runs (default 200)
//	-duration D        length of each latency run (default 30s)
//	-rates LIST        rising rates of the search for the highest rate of each leg with p99 < 100 ms (default 25,50,...,1000);
//	                   each rate's run prints its CPU ms per order by process and the machine's idle share
//	-rate-duration D   length of each run of that search (default 10s)
//	-relay-rows N      outbox rows of the relay comparison (default 50000)
//	-consumer-events N events queued for each consumer run (default 20000)
//	-tuned-workers N   the second STOCK_WORKERS setting (default 64)
//	-growth LIST       table sizes of the growth runs (default 10000,100000,1000000)
//	-only LIST         run only these steps: broker,relay,consumer,latency,maxrate,growth
//	-stock-env LIST    KEY=VALUE settings added to every bin/stock the bench starts (comma-separated)
//	-relay-env LIST    KEY=VALUE settings added to every relay process the bench starts (comma-separated)
//	-cpuprofile FILE   write a CPU profile of the bench process itself (the load generator) to FILE
//	-v                 show the warnings of the in-process relay
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"example.com/shop/e2e/internal/bench"
	"example.com/shop/platform/logging"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	cfg        bench.Config
	out        string
	quick      bool
	cpuProfile string
}

func parse(args []string, getenv func(string) string, stdout, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	fs.BoolVar(&o.quick, "quick", false, "small sizes: a smoke run of about a minute")
	fs.StringVar(&o.cfg.BinDir, "bin", "bin", "directory of the order, stock and shipping binaries")
	fs.StringVar(&o.out, "out", filepath.Join("bench", "out"), "directory for latest.json and chart.svg")
	fs.StringVar(&o.cfg.DatabaseURL, "db", env("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL server URL")
	fs.StringVar(&o.cfg.AMQPURL, "amqp", env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL")
	rate := fs.Int("rate", 0, "orders per second of the latency runs (default 200, quick 50)")
	duration := fs.Duration("duration", 0, "length of each latency run (default 30s, quick 1s)")
	rates := fs.String("rates", "", "comma-separated rising rates of the maxrate search (default 25,50,75,100,150,200,250,300,400,500,600,800,1000)")
	rateDuration := fs.Duration("rate-duration", 0, "length of each run of the maxrate search (default 10s)")
	relayRows := fs.Int("relay-rows", 0, "outbox rows of the relay comparison (default 50000)")
	events := fs.Int("consumer-events", 0, "events queued for each consumer run (default 20000)")
	tuned := fs.Int("tuned-workers", 0, "the second STOCK_WORKERS setting (default 64)")
	growth := fs.String("growth", "", "comma-separated table sizes of the growth runs (default 10000,100000,1000000)")
	verbose := fs.Bool("v", false, "show the warnings of the in-process relay")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process to this `file`")
	stockEnv := fs.String("stock-env", "", "comma-separated KEY=VALUE settings added to every bin/stock the bench starts")
	relayEnv := fs.String("relay-env", "", "comma-separated KEY=VALUE settings added to every relay process the bench starts")
	only := fs.String("only", "", "comma-separated steps to run: "+strings.Join(bench.Steps(), ","))
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.cfg.Sizes = bench.DefaultSizes()
	if o.quick {
		o.cfg.Sizes = bench.QuickSizes()
	}
	s := &o.cfg.Sizes
	setInt := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	setInt(&s.LatencyRate, *rate)
	setInt(&s.RelayRows, *relayRows)
	setInt(&s.ConsumerEvents, *events)
	setInt(&s.TunedWorkers, *tuned)
	if *duration > 0 {
		s.LatencyDuration = *duration
	}
	if *rateDuration > 0 {
		s.MaxRateDuration = *rateDuration
	}
	if *rates != "" {
		s.MaxRates = nil
		for _, part := range strings.Split(*rates, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(part))
			if err != nil {
				return o, fmt.Errorf("-rates %q: %w", *rates, err)
			}
			s.MaxRates = append(s.MaxRates, n)
		}
	}
	if *growth != "" {
		s.GrowthRows = nil
		for _, part := range strings.Split(*growth, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(part))
			if err != nil {
				return o, fmt.Errorf("-growth %q: %w", *growth, err)
			}
			s.GrowthRows = append(s.GrowthRows, n)
		}
	}
	if err := s.Validate(); err != nil {
		return o, err
	}
	if *only != "" {
		o.cfg.Only = strings.Split(*only, ",")
	}
	if *stockEnv != "" {
		o.cfg.StockEnv = strings.Split(*stockEnv, ",")
	}
	if *relayEnv != "" {
		o.cfg.RelayEnv = strings.Split(*relayEnv, ",")
	}
	o.cfg.Progress = stdout
	level := slog.LevelError + 4 // nothing
	if *verbose {
		level = slog.LevelWarn
	}
	o.cfg.Logger = logging.New(stderr, level, "bench")
	return o, nil
}

// run parses args, runs every measurement, prints the table and writes the
// JSON and the chart, also when some measurement failed (then with the
// results it has, and the error is returned).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parse(args, getenv, stdout, stderr)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	start := time.Now()
	results, runErr := bench.Run(ctx, o.cfg)
	elapsed := time.Since(start).Round(time.Second)

	fmt.Fprintf(stdout, "\nResults (%s, %d CPUs, %s):\n\n", mode(o.quick), runtime.NumCPU(), elapsed)
	if err := bench.WriteTable(stdout, results); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return errors.Join(runErr, err)
	}
	subtitle := fmt.Sprintf("%s run of %s on %d CPUs (%s/%s), %s in total",
		mode(o.quick), start.UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, elapsed)
	if load, ok := bench.LoadAverage(); ok {
		subtitle += fmt.Sprintf(", load average %.1f at the end", load)
	}
	if err := writeFile(filepath.Join(o.out, "latest.json"), func(w io.Writer) error { return bench.WriteJSON(w, results) }); err != nil {
		return errors.Join(runErr, err)
	}
	if err := writeFile(filepath.Join(o.out, "chart.svg"), func(w io.Writer) error {
		return bench.WriteChart(w, results, o.cfg.Sizes, subtitle)
	}); err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Fprintf(stdout, "\nwrote %s and %s\n", filepath.Join(o.out, "latest.json"), filepath.Join(o.out, "chart.svg"))
	return runErr
}

func mode(quick bool) string {
	if quick {
		return "quick"
	}
	return "full"
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
