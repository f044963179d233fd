package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/check"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// binDirEnv names the directory holding the binaries under test. TestMain
// sets it after building them; set it yourself (for example to ../bin after
// `make build`) to skip the build.
const binDirEnv = "E2E_BIN_DIR"

// settle bounds every wait for the system to catch up. It is a deadline for
// polling, never an assertion of speed.
const settle = 60 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv(binDirEnv) == "" {
		dir, err := os.MkdirTemp("", "shop-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		if err := system.Build(ctx, dir, raceEnabled); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: build the binaries:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "e2e: built the binaries in %s (race=%v)\n", time.Since(start).Round(time.Second), raceEnabled)
		os.Setenv(binDirEnv, dir)
	}
	code := m.Run()
	for _, line := range afterSuite {
		if l := line(); l != "" {
			fmt.Fprintln(os.Stderr, l)
		}
	}
	return code
}

// afterSuite gives lines for CI logs once every test has run (the fault
// drills' ledger summary; "" prints nothing); a file adds its own in an init.
var afterSuite []func() string

// testSystem is one running system of the suite with its own databases and vhost.
type testSystem struct {
	t       *testing.T
	sys     *system.System
	api     *system.Client
	dbs     check.DBs
	amqpURL string
	// relayURLs are the broker URLs of the relay users, by producer: an event
	// published as one of them is one its consumers accept (RELAY_USERS).
	relayURLs map[string]string
	crashMu   *sync.Mutex // one crash and restart at a time (shared by the copies of shop.on)
}

// options change how newShop starts the system.
type options struct {
	env     map[string][]string // extra KEY=VALUE per process name ("order", "order-relay", "stock", "stock-relay", "shipping", "auditor", "" for all)
	auditor bool                // run `auditor serve` too
}

// fastRetries makes failed deliveries come back quickly: the suite never
// waits on the production delays (seconds).
func fastRetries() []string {
	return []string{
		"STOCK_MAX_ATTEMPTS=4",
		"STOCK_RETRY_DELAYS=50ms,100ms,200ms",
		"SHIPPING_MAX_ATTEMPTS=4",
		"SHIPPING_RETRY_DELAYS=50ms,100ms,200ms",
		"ORDER_MAX_ATTEMPTS=4",
		"ORDER_RETRY_DELAYS=50ms,100ms,200ms",
		"RELAY_POLL_INTERVAL=200ms",
	}
}

// newShop migrates a fresh database per service of the registry, makes a fresh
// vhost, starts the processes (system.New), each under its own database role and broker user
// (leastPrivilege; the auditor, when asked for, under the read-only role
// auditor and the broker user auditor), and waits until they are ready. Everything is stopped and
// dropped when the test ends; on failure the processes' last output is
// logged.
func newShop(t *testing.T, opt options) *testSystem {
	t.Helper()
	dbURLs, auditorURLs := map[string]string{}, map[string]string{}
	for _, svc := range contracts.Services() {
		dbURLs[svc.Name] = testkit.EmptyDatabaseURL(t)
		auditorURLs[svc.Name] = testkit.URLAs(t, dbURLs[svc.Name], "auditor")
	}
	orderURL, stockURL, shippingURL := dbURLs[contracts.ProducerOrder], dbURLs[contracts.ConsumerStock], dbURLs[contracts.ConsumerShipping]
	amqpURL, brokerURLs := testkit.NewVhostWithUsers(t, brokerUsers(t))

	cfg := system.Config{
		BinDir:        os.Getenv(binDirEnv),
		DBURLs:        dbURLs,
		AMQPURL:       amqpURL,
		Env:           append(fastRetries(), opt.env[""]...),
		ProcessEnv:    leastPrivilege(t, orderURL, stockURL, shippingURL, brokerURLs),
		Auditor:       opt.auditor,
		AuditorDBURLs: auditorURLs,
	}
	for name, kv := range opt.env {
		if name != "" {
			cfg.ProcessEnv[name] = append(cfg.ProcessEnv[name], kv...)
		}
	}
	if dir := os.Getenv("E2E_LOG_DIR"); dir != "" {
		f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".log"))
		if err != nil {
			t.Fatalf("log file: %v", err)
		}
		t.Cleanup(func() { f.Close() })
		cfg.Log = &lockedWriter{w: f}
	}
	sys, err := system.New(cfg)
	if err != nil {
		t.Fatalf("new system: %v", err)
	}
	ctx := testkit.Context(t)
	if err := sys.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	dbs, err := check.Open(ctx, orderURL, stockURL, shippingURL)
	if err != nil {
		t.Fatalf("open databases: %v", err)
	}
	t.Cleanup(dbs.Close)
	t.Cleanup(func() { stopAndReport(t, sys.Stop, sys.All()) })
	if err := sys.Start(ctx, settle); err != nil {
		t.Fatalf("start: %v", err)
	}
	relayURLs := map[string]string{}
	for _, p := range contracts.Producers() {
		relayURLs[p.Name] = brokerURLs[system.RelayName(p.Name)]
	}
	return &testSystem{t: t, sys: sys, api: sys.Client(), dbs: dbs, amqpURL: amqpURL, relayURLs: relayURLs, crashMu: new(sync.Mutex)}
}

// asRelayOf returns the broker URL of the relay user of the producer of
// eventName, through which a test publishes an event its consumers accept.
func (s *testSystem) asRelayOf(eventName string) string {
	p, ok := contracts.ProducerOf(eventName)
	if !ok {
		s.t.Fatalf("no producer publishes %s", eventName)
	}
	return s.relayURLs[p.Name]
}

// stopAndReport stops the processes with stop, fails t for every data race
// they reported, and logs their last output when t failed.
func stopAndReport(t *testing.T, stop func() error, procs []*system.Process) {
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	for _, p := range procs {
		out := p.Output()
		if strings.Contains(out, "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", p.Name, raceReport(out))
		}
		if t.Failed() {
			t.Logf("last output of %s:\n%s", p.Name, tail(out, 40))
		}
	}
}

// lockedWriter serialises writes of several processes to one file.
type lockedWriter struct {
	mu sync.Mutex
	w  *os.File
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func raceReport(s string) string {
	i := strings.Index(s, "WARNING: DATA RACE")
	s = s[i:]
	if j := strings.Index(s, "=================="); j > 0 {
		s = s[:j]
	}
	return s
}

// newLines returns n order lines with fresh product ids and quantities
// "1.000" .. "n.500".
func newLines(n int) []system.Line {
	lines := make([]system.Line, n)
	for i := range lines {
		lines[i] = system.Line{ProductID: uuid.NewString(), Quantity: fmt.Sprintf("%d.500", i+1)}
	}
	return lines
}

// createOrder creates a draft order with n lines, failing the test on error.
func (s *testSystem) createOrder(ctx context.Context, n int) system.Order {
	s.t.Helper()
	o, err := s.api.CreateOrder(ctx, uuid.NewString(), newLines(n))
	if err != nil {
		s.t.Fatalf("create order: %v", err)
	}
	if o.Status != "draft" || o.Version != 1 || len(o.Lines) != n {
		s.t.Fatalf("created order = %+v, want a draft at version 1 with %d lines", o, n)
	}
	return o
}

// place places order id and fails the test unless the API answers want.
func (s *testSystem) place(ctx context.Context, id string, want int) {
	s.t.Helper()
	got, err := s.api.Place(ctx, id)
	if err != nil || got != want {
		s.t.Fatalf("place %s: status %d, err %v; want %d", id, got, err, want)
	}
}

// eventually polls cond every 100 ms until it returns "" (done) or settle
// passes; it then fails the test with the last message cond returned.
func eventually(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s: %s", what, settle, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// invariants waits until the whole-system invariants hold (check.Invariants)
// and fails the test with every broken one when they do not within settle.
func (s *testSystem) invariants(ctx context.Context) check.Report {
	s.t.Helper()
	r, err := check.Eventually(ctx, s.dbs, settle)
	if err != nil {
		s.t.Fatalf("invariants: %v", err)
	}
	if !r.OK() {
		s.t.Fatalf("invariants broken after %s:\n%s", settle, r)
	}
	return r
}

// count runs a query returning one integer on pool.
func count(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
