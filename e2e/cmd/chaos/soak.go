package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/chaos"
	"example.com/shop/e2e/internal/fault"
	"example.com/shop/platform/backoff"
)

// settle bounds the wait for the system to recover after the last fault.
const settle = 5 * time.Minute

// grace is the longest a process may take to exit after SIGTERM.
const grace = 15 * time.Second

// restartWait bounds the wait for a restarted process to be ready.
const restartWait = 2 * time.Minute

// kind is one sort of fault: it picks its target and duration with rng,
// raises the fault, holds it and lifts it before returning.
type kind struct {
	name     string
	min, max time.Duration // how long the fault is held (0, 0: a single blow)
	apply    func(ctx context.Context, s *soak, rng *rand.Rand, d time.Duration) (target string, err error)
}

// soak is one chaos run.
type soak struct {
	rig   *fault.Rig
	node  *fault.Node
	out   io.Writer
	start time.Time

	mu       sync.Mutex
	problems []string // faults that went wrong: a process not exiting on SIGTERM, not ready after a restart
}

// databases are the services of the registry, each with its own database.
func databases() []string {
	var out []string
	for _, s := range contracts.Services() {
		out = append(out, s.Name)
	}
	return out
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// toxic holds a Toxiproxy toxic on a random proxy for d.
func toxic(kindName string, attrs func(rng *rand.Rand) map[string]any) func(context.Context, *soak, *rand.Rand, time.Duration) (string, error) {
	return func(ctx context.Context, s *soak, rng *rand.Rand, d time.Duration) (string, error) {
		p := pick(rng, s.rig.Proxies())
		remove, err := s.rig.Net.Toxic(p, kindName, attrs(rng))
		if err != nil {
			return p, err
		}
		_ = backoff.Sleep(ctx, d)
		remove()
		return p, nil
	}
}

func kinds() []kind {
	fixed := func(m map[string]any) func(*rand.Rand) map[string]any {
		return func(*rand.Rand) map[string]any { return m }
	}
	return []kind{
		{"timeout", 2 * time.Second, 10 * time.Second, toxic("timeout", fixed(map[string]any{"timeout": 0}))},
		{"latency", 5 * time.Second, 15 * time.Second, toxic("latency", func(rng *rand.Rand) map[string]any {
			return map[string]any{"latency": 200 + rng.IntN(1800), "jitter": 100}
		})},
		{"reset_peer", 2 * time.Second, 8 * time.Second, toxic("reset_peer", fixed(map[string]any{"timeout": 0}))},
		{"bandwidth0", 2 * time.Second, 10 * time.Second, toxic("bandwidth", fixed(map[string]any{"rate": 0}))},
		{"cut", 2 * time.Second, 15 * time.Second, func(ctx context.Context, s *soak, rng *rand.Rand, d time.Duration) (string, error) {
			p := pick(rng, s.rig.Proxies())
			if err := s.rig.Net.Disable(p); err != nil {
				return p, err
			}
			_ = backoff.Sleep(ctx, d)
			return p, s.rig.Net.Enable(p)
		}},
		{"db-outage", 60 * time.Second, 90 * time.Second, func(ctx context.Context, s *soak, rng *rand.Rand, d time.Duration) (string, error) {
			db := pick(rng, databases())
			unblock, err := s.rig.BlockDatabase(ctx, db)
			if err != nil {
				return db, err
			}
			_ = backoff.Sleep(ctx, d)
			return db, unblock(context.WithoutCancel(ctx))
		}},
		{"terminate-backends", 0, 0, func(ctx context.Context, s *soak, rng *rand.Rand, _ time.Duration) (string, error) {
			db := pick(rng, databases())
			_, err := s.rig.TerminateBackends(ctx, db)
			return db, err
		}},
		{"paused-listener", 5 * time.Second, 15 * time.Second, func(ctx context.Context, s *soak, rng *rand.Rand, d time.Duration) (string, error) {
			db := pick(rng, databases())
			var removes []func()
			for _, p := range s.rig.Proxies() {
				if strings.HasSuffix(p, "-pg") && s.rig.ServiceOf(p) == db {
					remove, err := s.rig.Net.Toxic(p, "timeout", map[string]any{"timeout": 0})
					if err != nil {
						return db, err
					}
					removes = append(removes, remove)
				}
			}
			_ = backoff.Sleep(ctx, d)
			for _, remove := range removes {
				remove()
			}
			return db, nil
		}},
		{"sigkill", 0, 0, func(ctx context.Context, s *soak, rng *rand.Rand, _ time.Duration) (string, error) {
			name := pick(rng, s.rig.Processes())
			return name, s.rig.Kill(ctx, s.rig.Process(name), restartWait)
		}},
		{"sigstop", 2 * time.Second, 12 * time.Second, func(ctx context.Context, s *soak, rng *rand.Rand, d time.Duration) (string, error) {
			name := pick(rng, s.rig.Processes())
			return name, s.rig.Freeze(ctx, s.rig.Process(name), d)
		}},
		{"sigterm", 0, 0, func(ctx context.Context, s *soak, rng *rand.Rand, _ time.Duration) (string, error) {
			name := pick(rng, s.rig.Processes())
			p := s.rig.Process(name)
			took, err := s.rig.Term(ctx, p, grace)
			return fmt.Sprintf("%s (exited in %s)", name, took.Round(time.Millisecond)), errors.Join(err, s.rig.Restart(ctx, p, restartWait))
		}},
		{"memory-alarm", 10 * time.Second, 30 * time.Second, func(ctx context.Context, s *soak, _ *rand.Rand, d time.Duration) (string, error) {
			if _, err := s.node.Ctl(ctx, "set_vm_memory_high_watermark", "0.0000001"); err != nil {
				return "broker", err
			}
			_ = backoff.Sleep(ctx, d)
			_, err := s.node.Ctl(context.WithoutCancel(ctx), "set_vm_memory_high_watermark", "0.4")
			return "broker", err
		}},
		{"stop-app", 5 * time.Second, 15 * time.Second, func(ctx context.Context, s *soak, _ *rand.Rand, d time.Duration) (string, error) {
			if _, err := s.node.Ctl(ctx, "stop_app"); err != nil {
				return "broker", err
			}
			_ = backoff.Sleep(ctx, d)
			_, err := s.node.Ctl(context.WithoutCancel(ctx), "start_app")
			return "broker", err
		}},
		{"reject-publish", 5 * time.Second, 15 * time.Second, func(ctx context.Context, s *soak, rng *rand.Rand, d time.Duration) (string, error) {
			// A quorum queue refuses publishes once it is full, so its
			// consumer stalls (SIGSTOP) behind a max-length of 1.
			q, consumer := contracts.QueueStock, "stock"
			if rng.IntN(2) == 1 {
				q, consumer = contracts.QueueShipping, "shipping"
			}
			pattern := "^" + strings.ReplaceAll(q, ".", `\.`) + "$"
			if _, err := s.node.Ctl(ctx, "set_policy", "-p", "/", "chaos-refuse", pattern, `{"max-length":1,"overflow":"reject-publish"}`, "--apply-to", "queues"); err != nil {
				return q, err
			}
			err := s.rig.Freeze(ctx, s.rig.Process(consumer), d)
			_, cerr := s.node.Ctl(context.WithoutCancel(ctx), "clear_policy", "-p", "/", "chaos-refuse")
			return q, errors.Join(err, cerr)
		}},
		{"delete-exchange", 0, 0, func(ctx context.Context, s *soak, _ *rand.Rand, _ time.Duration) (string, error) {
			return contracts.Exchange, s.rig.Broker(ctx, func(ch *amqp091.Channel) error {
				return ch.ExchangeDelete(contracts.Exchange, false, false)
			})
		}},
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	st, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	if st.seed == 0 {
		st.seed = uint64(time.Now().UnixNano())
	}
	fmt.Fprintf(stdout, "chaos: %s topology, seed %d (reproduce with CHAOS_SEED=%d or -seed %d), %d orders at about %d/s\n", st.topo, st.seed, st.seed, st.seed, st.orders, st.rate)

	bin, err := filepath.Abs(st.binDir)
	if err != nil {
		return err
	}
	for _, b := range []string{"order", "stock", "shipping"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return fmt.Errorf("binary %s missing in %s: run `make build` first", b, bin)
		}
	}
	if err := os.MkdirAll(st.logDir, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(st.logDir, fmt.Sprintf("chaos-%s-%d.log", st.topo, st.seed)))
	if err != nil {
		return err
	}
	defer logFile.Close()
	if st.topo == "cluster" {
		return runCluster(ctx, st, bin, logFile, stdout)
	}

	node, err := fault.StartNode(ctx)
	if err != nil {
		return err
	}
	defer node.Stop()
	fmt.Fprintf(stdout, "chaos: private RabbitMQ node %s\n", node.Name)

	dbURLs, drop, err := databasesFor(ctx, st.dbURL, st.seed)
	if err != nil {
		return err
	}
	defer drop()

	rig, err := fault.New(ctx, fault.Config{
		BinDir:  bin,
		DBURLs:  dbURLs,
		AMQPURL: node.AMQPURL,
		Ctl:     node.Ctl,
		Vhost:   "/",
		Env:     []string{"RELAY_POLL_INTERVAL=200ms", "LOG_LEVEL=info"},
		Log:     logFile,
	})
	if err != nil {
		return err
	}
	defer rig.Close()
	if err := rig.Start(ctx, restartWait); err != nil {
		return err
	}
	s := &soak{rig: rig, node: node, out: stdout, start: time.Now()}

	const clients = 4
	pause := time.Duration(clients) * time.Second / time.Duration(st.rate)
	load := rig.StartLoad(ctx, clients, pause, st.orders)
	loadDone := make(chan struct{})
	go func() { load.Wait(); close(loadDone) }()

	rng := rand.New(rand.NewPCG(st.seed, st.seed^0x9e3779b97f4a7c15))
	ks := kinds()
	fmt.Fprintf(stdout, "\n%-9s %-19s %-30s %s\n", "time", "fault", "target", "duration")
	for n := 0; ; n++ {
		gap := time.Duration(2000+rng.IntN(6000)) * time.Millisecond
		select {
		case <-loadDone:
		case <-ctx.Done():
		case <-time.After(gap):
		}
		if isDone(loadDone) || ctx.Err() != nil {
			break
		}
		k := ks[rng.IntN(len(ks))]
		d := k.min
		if k.max > k.min {
			d += time.Duration(rng.Int64N(int64(k.max - k.min)))
		}
		at := time.Since(s.start)
		target, err := k.apply(ctx, s, rng, d)
		line := fmt.Sprintf("%-9s %-19s %-30s %s", fmtDur(at), k.name, target, fmtDur(d))
		if err != nil {
			line += "  ERROR: " + firstLine(err.Error())
			s.problems = append(s.problems, fmt.Sprintf("%s on %s at %s: %v", k.name, target, fmtDur(at), firstLine(err.Error())))
		}
		fmt.Fprintf(stdout, "%s  (placed %d)\n", line, rig.Placed())
	}
	load.Stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Fprintf(stdout, "\nchaos: load done after %s (%d failed requests retried); waiting up to %s for the system to settle\n", fmtDur(time.Since(s.start)), load.Errors(), settle)

	l, err := rig.Ledger(ctx, settle, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nledger (seed %d)\n", st.seed)
	fmt.Fprintf(stdout, "  placed         %d\n  confirmed      %d\n  reserved       %d\n  lost           %d\n  doubled        %d\n  duplicates     %d\n  dead-lettered  %d (%d events not delivered)\n  longest stall  %s\n  not ready      %d\n",
		l.Placed, l.Confirmed, l.Reserved, l.Lost, l.Doubled, l.Duplicates, l.DeadLetters(), l.NotDelivered, fmtDur(l.LongestStall), len(l.NotReady))
	fmt.Fprintf(stdout, "summary: %s\n", l)
	failures := append(l.Failures(nil), s.problems...)
	if len(failures) > 0 {
		return fmt.Errorf("%d problems:\n%s", len(failures), strings.Join(failures, "\n"))
	}
	fmt.Fprintln(stdout, "chaos: every invariant holds")
	return nil
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func fmtDur(d time.Duration) string {
	return d.Round(100 * time.Millisecond).String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// databasesFor returns the URLs of fresh database names on the server of
// serverURL, one per service of the registry, by service (`migrate` creates
// them), and a function that drops them.
func databasesFor(ctx context.Context, serverURL string, seed uint64) (map[string]string, func(), error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme == "" {
		return nil, nil, fmt.Errorf("CHAOS_DATABASE_URL %q is not a postgres:// URL", serverURL)
	}
	suffix := fmt.Sprintf("%d_%d", seed%1_000_000, time.Now().UnixNano()%1_000_000)
	urls, names := map[string]string{}, []string{}
	for _, db := range databases() {
		name := "chaos_" + db + "_" + suffix
		v := *u
		v.Path = "/" + name
		urls[db], names = v.String(), append(names, name)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		for _, n := range names {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
		}
	}
	return urls, drop, nil
}

// runCluster is the cluster topology (package chaos): it fails, naming the
// seed, when the ledger does not hold.
func runCluster(ctx context.Context, st settings, bin string, log io.Writer, stdout io.Writer) error {
	res, err := chaos.Cluster(ctx, chaos.Options{
		Seed: st.seed, Orders: st.orders, Faults: st.faults, Rate: st.rate, BinDir: bin, Log: log, Out: stdout, Async: st.async,
	})
	if err != nil {
		return fmt.Errorf("seed %d (CHAOS_SEED=%d replays it): %w", st.seed, st.seed, err)
	}
	if f := res.Failures(); len(f) > 0 {
		return fmt.Errorf("seed %d (CHAOS_SEED=%d replays it): %d problems:\n%s", st.seed, st.seed, len(f), strings.Join(f, "\n"))
	}
	fmt.Fprintln(stdout, "chaos: every invariant holds")
	return nil
}
