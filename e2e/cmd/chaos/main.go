// Command chaos is a seeded soak of the shop: it places -orders orders
// through the order API while it raises random faults, one after the
// other, on the real binaries (order API, leader and standby relay, stock,
// shipping): network toxics between each process and PostgreSQL or
// RabbitMQ, database outages, terminated sessions, a paused database
// listener, SIGKILL, SIGSTOP and SIGTERM, a broker memory alarm, a broker
// stop_app/start_app, a queue refusing publishes (its consumer stalled
// behind a max-length 1 + reject-publish policy), a deleted exchange. Then
// it checks the ledger across every service's database.
//
// Everything runs on a private RabbitMQ node it starts (and stops) and on
// fresh databases, one per service of the registry, on the PostgreSQL server of CHAOS_DATABASE_URL
// (default postgres://postgres@127.0.0.1:5432/postgres), dropped at the end.
// The seed picks the faults, their targets, durations and gaps; the same
// seed gives the same fault sequence (the moments the load reaches differ).
//
//	go run ./e2e/cmd/chaos -orders 10000 -seed 42
//
// Flags (CHAOS_SEED sets the seed too):
//
//	-orders N   orders to place (default 10000)
//	-seed N     seed of the fault sequence (default: the clock; printed)
//	-rate N     orders per second the load aims at (default 40)
//	-bin DIR    directory of the order, stock and shipping binaries (default bin)
//	-logs DIR   the processes' output (default .chaos/logs)
//
// It exits 1 when an event was lost or reserved twice, an invariant is
// broken, or a process was not ready again by itself.
//
// With -topology cluster (make chaos TOPOLOGY=cluster; needs root) it runs the
// whole saga, two processes of each kind, on a private three-node RabbitMQ
// cluster and a PostgreSQL primary with a synchronous standby instead, while a
// seeded nemesis raises overlapping faults on the broker hosts, the database
// and the processes (package e2e/internal/chaos):
//
//	-topology T  single (default) or cluster
//	-faults D    cluster: how long to raise faults (default 0: until the orders are placed)
//	-async       cluster: asynchronous replication (a failover may lose acknowledged orders; the ledger says so)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

// settings are the soak's flags and environment.
type settings struct {
	orders int
	seed   uint64
	rate   int
	binDir string
	logDir string
	dbURL  string
	topo   string
	faults time.Duration
	async  bool
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (settings, error) {
	s := settings{dbURL: getenv("CHAOS_DATABASE_URL")}
	if s.dbURL == "" {
		s.dbURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	defSeed := uint64(0)
	if raw := getenv("CHAOS_SEED"); raw != "" {
		v, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			return s, fmt.Errorf("CHAOS_SEED=%q is not a number", raw)
		}
		defSeed = v
	}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&s.orders, "orders", 10000, "orders to place")
	fs.Uint64Var(&s.seed, "seed", defSeed, "seed of the fault sequence (0: the clock)")
	fs.IntVar(&s.rate, "rate", 40, "orders per second the load aims at")
	fs.StringVar(&s.binDir, "bin", "bin", "directory of the order, stock and shipping binaries")
	fs.StringVar(&s.logDir, "logs", ".chaos/logs", "directory of the processes' output")
	fs.StringVar(&s.topo, "topology", "single", "single: one broker node, one database; cluster: three nodes, primary and standby")
	fs.DurationVar(&s.faults, "faults", 0, "cluster: how long to raise faults (0: until the orders are placed)")
	fs.BoolVar(&s.async, "async", false, "cluster: asynchronous replication (a failover may lose acknowledged orders)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if s.topo != "single" && s.topo != "cluster" {
		return s, fmt.Errorf("-topology %q: want single or cluster", s.topo)
	}
	if s.orders < 1 || s.rate < 1 {
		return s, fmt.Errorf("-orders and -rate must be positive")
	}
	return s, nil
}
