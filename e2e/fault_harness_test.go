//go:build drills

package e2e_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/fault"
	"example.com/shop/testkit"
)

// faultSettle bounds the wait for the system to recover after a fault: every
// process ready again and the ledger whole. A deadline, never a speed goal.
const faultSettle = 90 * time.Second

// broker is where a rig's vhost lives.
type broker struct {
	amqpURL string
	vhost   string
	ctl     func(ctx context.Context, args ...string) (string, error)
}

// sharedVhost makes a fresh vhost on the test broker (testkit.NewVhost);
// rabbitmqctl on this machine sets its policies. Nothing node-wide is ever
// raised on it.
func sharedVhost(t *testing.T) broker {
	amqpURL := testkit.NewVhost(t)
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatalf("vhost URL: %v", err)
	}
	vhost := strings.TrimPrefix(u.Path, "/")
	if v, err := url.PathUnescape(vhost); err == nil {
		vhost = v
	}
	return broker{amqpURL: amqpURL, vhost: vhost, ctl: func(ctx context.Context, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
		return string(out), err
	}}
}

// privateNode starts a private RabbitMQ node for node-wide faults and stops
// it when the test ends.
func privateNode(t *testing.T) *fault.Node {
	n, err := fault.StartNode(testkit.Context(t))
	if err != nil {
		t.Fatalf("private RabbitMQ node: %v", err)
	}
	t.Cleanup(n.Stop)
	t.Logf("private RabbitMQ node %s at %s", n.Name, n.AMQPURL)
	return n
}

// nodeVhost makes a fresh vhost on the private node n.
func nodeVhost(t *testing.T, n *fault.Node) broker {
	ctx := testkit.Context(t)
	vhost := testkit.UniqueName(t, "fault")
	if _, err := n.Ctl(ctx, "add_vhost", vhost); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Ctl(ctx, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	return broker{amqpURL: n.AMQPURL + url.PathEscape(vhost), vhost: vhost, ctl: n.Ctl}
}

// newRig starts the shop behind proxies on fresh databases and b, with the
// suite's fast retries, and stops it when the test ends (logging the
// processes' last output when the test failed). Each of opts may change the
// rig's configuration first (another database, the auditor).
func newRig(t *testing.T, b broker, processEnv map[string][]string, opts ...func(*fault.Config)) *fault.Rig {
	t.Helper()
	ctx := testkit.Context(t)
	cfg := fault.Config{
		BinDir:     os.Getenv(binDirEnv),
		DBURLs:     map[string]string{},
		AMQPURL:    b.amqpURL,
		Ctl:        b.ctl,
		Vhost:      b.vhost,
		Env:        fastRetries(),
		ProcessEnv: processEnv,
	}
	for _, svc := range contracts.Services() {
		cfg.DBURLs[svc.Name] = testkit.EmptyDatabaseURL(t)
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	if dir := os.Getenv("E2E_LOG_DIR"); dir != "" {
		f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".log"))
		if err != nil {
			t.Fatalf("log file: %v", err)
		}
		t.Cleanup(func() { f.Close() })
		cfg.Log = f
	}
	r, err := fault.New(ctx, cfg)
	if err != nil {
		t.Fatalf("rig: %v", err)
	}
	t.Cleanup(func() { stopAndReport(t, r.Close, r.Sys.All()) })
	if err := r.Start(ctx, faultSettle); err != nil {
		t.Fatalf("start: %v", err)
	}
	return r
}

// underLoad runs fault while two clients place orders: the load starts,
// `before` more orders are placed, fault runs (it returns when the fault is
// lifted), `after` more orders are placed (so the system works again), and
// the load stops. Then ledger checks the result.
func underLoad(t *testing.T, r *fault.Rig, before, after int, fault func(ctx context.Context)) {
	t.Helper()
	ctx := testkit.Context(t)
	load := r.StartLoad(ctx, 2, 20*time.Millisecond, 0)
	defer load.Stop()
	if err := r.WaitPlaced(ctx, r.Placed()+before, faultSettle); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	fault(ctx)
	if err := r.WaitPlaced(ctx, r.Placed()+after, faultSettle); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
	load.Stop()
	t.Logf("load: %d failed requests retried", load.Errors())
}

// ledger waits until the system settles and fails the test with everything
// the ledger finds wrong; wantDLQ is what the dead-letter queues should hold.
// It logs the ledger's summary line either way.
func ledger(t *testing.T, r *fault.Rig, wantDLQ map[string]int) fault.Ledger {
	t.Helper()
	l, err := r.Ledger(testkit.Context(t), faultSettle, wantDLQ)
	t.Logf("ledger: %s", l)
	ledgers.add(t.Name(), l)
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	if f := l.Failures(wantDLQ); len(f) > 0 {
		t.Fatalf("ledger:\n%s", strings.Join(f, "\n"))
	}
	return l
}

// steps runs faults one after the other on one rig, each as a subtest
// ending with its ledger. Once one fails the ledger stays broken, so the
// later ones fail at once, naming it, instead of waiting out their deadlines.
type steps struct{ broken string }

func (s *steps) run(t *testing.T, r *fault.Rig, name string, fn func(t *testing.T, r *fault.Rig)) {
	t.Run(name, func(t *testing.T) {
		if s.broken != "" {
			t.Fatalf("not run: the system is still broken since %s", s.broken)
		}
		defer func() {
			if t.Failed() {
				s.broken = name
			}
		}()
		fn(t, r)
	})
}

// ledgers collects every scenario's ledger for the suite's summary line.
var ledgers ledgerLog

func init() { afterSuite = append(afterSuite, ledgers.summary) }

type ledgerLog struct {
	mu    sync.Mutex
	n     int
	dups  int
	lost  int
	twice int
	stall time.Duration
	where string
}

func (g *ledgerLog) add(name string, l fault.Ledger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	g.dups += l.Duplicates
	g.lost += l.Lost
	g.twice += l.Doubled
	if l.LongestStall > g.stall {
		g.stall, g.where = l.LongestStall, name
	}
}

// summary is one line for CI logs, or "" when no fault scenario ran.
func (g *ledgerLog) summary() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		return ""
	}
	return fmt.Sprintf("fault suite: %d ledgers, lost %d, doubled %d, duplicates %d, longest stall %s (%s)",
		g.n, g.lost, g.twice, g.dups, g.stall.Round(10*time.Millisecond), g.where)
}
