// Command demo runs the whole shop on real PostgreSQL and RabbitMQ and shows,
// step by step, that no event is lost and none takes effect twice, on both
// legs of an order: order's events to stock and shipping, and stock's answer
// back to order (12 orders racing for 5 units: 5 confirmed, 7 rejected; a
// cancel releasing a unit that a later order gets). `make demo` builds the
// binaries into bin/ and runs it.
//
// It runs every service of the registry (contracts.Services): each one's serve,
// a relay per producer, each under its own database role and broker user. It uses
// the servers of each service's <NAME>_DATABASE_URL (ORDER_DATABASE_URL, ...) and
// AMQP_URL (or the local defaults), but never their databases: each run drops
// and re-creates demo_<database> for each service (demo_orders, demo_stock,
// demo_shipping, ...) on those servers, and the RabbitMQ vhost shop-demo, so
// that every run starts clean and leaves the real ones alone.
// When the servers do not answer and `docker compose` is available it runs
// `docker compose up -d postgres rabbitmq` first.
//
// The auditor runs beside the shop; its live page (printed at the start) shows
// every order moving through the tables, and the demo ends by asking it whether
// any published event is unaccounted for.
//
// The processes' logs go to .demo/logs/<process>.log. The exit code is 1 when
// any end-to-end invariant fails. Flags:
//
//	-bin DIR     directory of the binaries, one per service and the auditor (default bin)
//	-orders N    orders placed during the relay crash (default 300)
//	-keep        keep the system running after the summary, until Ctrl-C
//	-logs DIR    where the processes' logs go (default .demo/logs)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"example.com/shop/contracts"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	var usage usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "\ndemo:", err)
		os.Exit(1)
	}
}

// usageError is a command line the demo cannot run: it exits with status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// settings are the demo's flags and environment.
type settings struct {
	binDir string
	logDir string
	orders int
	keep   bool
	// dbServers are the database URLs as configured, by service name
	// (contracts.Services); the demo swaps the database names.
	dbServers map[string]string
	amqpURL   string
	// otlpEndpoint is OTEL_EXPORTER_OTLP_ENDPOINT, which the processes inherit.
	otlpEndpoint string
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.binDir, "bin", "bin", "directory of the binaries, one per service and the auditor")
	fs.StringVar(&s.logDir, "logs", filepath.Join(".demo", "logs"), "directory for the processes' logs")
	fs.IntVar(&s.orders, "orders", 300, "orders placed while the relay crashes")
	fs.BoolVar(&s.keep, "keep", false, "keep the system running after the summary, until Ctrl-C")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return s, err
	} else if err != nil {
		return s, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return s, usageError{fmt.Sprintf("unexpected argument %q: the demo takes only flags (-h lists them)", fs.Arg(0))}
	}
	if s.orders < 10 {
		return s, usageError{"-orders must be at least 10"}
	}
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	s.dbServers = map[string]string{}
	bins := []string{"auditor"}
	for _, svc := range contracts.Services() {
		s.dbServers[svc.Name] = env(dbVar(svc.Name), "postgres://postgres@localhost:5432/"+svc.Database+"?sslmode=disable")
		bins = append(bins, svc.Name)
	}
	s.amqpURL = env("AMQP_URL", "amqp://guest:guest@localhost:5672/")
	s.otlpEndpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(s.binDir, b)); err != nil {
			return s, fmt.Errorf("binary %s not found in %s: run `make build` first (or `make demo`)", b, s.binDir)
		}
	}
	return s, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	d := &demo{s: s, ui: newUI(stdout, 0)}
	defer d.stop()
	return d.run(ctx)
}

// dbVar is the variable of service's database URL: ORDER_DATABASE_URL.
func dbVar(service string) string {
	return strings.ToUpper(strings.ReplaceAll(service, "-", "_")) + "_DATABASE_URL"
}

// maxWait bounds every wait of the demo for the system to catch up.
const maxWait = 60 * time.Second
