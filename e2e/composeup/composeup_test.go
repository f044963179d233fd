//go:build compose

package composeup

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/check"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// settle bounds every wait for the system to catch up. The images start on a
// shared 2-core machine; PostgreSQL and RabbitMQ take up to a minute there.
const settle = 3 * time.Minute

// env reads the variables deploy/compose-test.sh sets; a missing one fails the
// test, so that it never runs on the default ports of a developer's own servers.
type env struct {
	project  string
	skip     []string // services with no image on this machine
	ports    map[string]string
	postgres string // host:port of the published PostgreSQL
}

func readEnv(t *testing.T) env {
	t.Helper()
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			t.Fatalf("%s is not set: run this test through `make compose-test`", k)
		}
		return v
	}
	e := env{project: get("COMPOSE_PROJECT_NAME"), ports: map[string]string{}}
	// The compose services that publish a port, each under its variable: every
	// service's serve, every producer's first relay, the auditor.
	e.ports["auditor"] = "127.0.0.1:" + get("AUDITOR_PORT")
	for _, s := range contracts.Services() {
		upper := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		e.ports[s.Name] = "127.0.0.1:" + get(upper+"_PORT")
		if s.RelayAddr != "" {
			e.ports[system.RelayName(s.Name)] = "127.0.0.1:" + get(upper+"_RELAY_PORT")
		}
	}
	e.postgres = "127.0.0.1:" + get("POSTGRES_PORT")
	e.skip = strings.Fields(os.Getenv("COMPOSE_TEST_SKIP"))
	return e
}

// compose runs `docker compose` on the repository's docker-compose.yml and
// returns its combined output; it fails the test when the command fails.
func compose(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := composeErr(ctx, args...)
	if err != nil {
		t.Fatalf("docker compose %s: %v\n%s", strings.Join(args, " "), err, tail(out, 60))
	}
	return out
}

func composeErr(ctx context.Context, args ...string) (string, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "docker", append([]string{"compose", "-f", filepath.Join(root, "docker-compose.yml")}, args...)...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// eventually polls cond every 250 ms until it returns "" or settle passes, then
// fails the test with the last message cond returned.
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
		time.Sleep(250 * time.Millisecond)
	}
}

// TestComposeUp runs docker-compose.yml as a user does and checks that no order
// is lost through a relay crash (docs/architecture.md, rules 1 to 3).
func TestComposeUp(t *testing.T) {
	e := readEnv(t)
	ctx := t.Context()
	started := time.Now()
	step := func(format string, args ...any) {
		t.Logf("%6.1fs  %s", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
	}

	// Whatever happens, leave nothing behind; on failure show what the
	// containers said first.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if t.Failed() {
			out, _ := composeErr(cctx, "ps", "-a")
			t.Logf("docker compose ps -a:\n%s", out)
			out, _ = composeErr(cctx, "logs", "--no-color", "--tail", "40")
			t.Logf("docker compose logs:\n%s", out)
		}
		if out, err := composeErr(cctx, "--profile", "*", "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("docker compose down -v: %v\n%s", err, out)
		}
	})

	services := strings.Fields(compose(t, ctx, "config", "--services"))
	var up []string
	for _, s := range services {
		if !slices.Contains(e.skip, s) {
			up = append(up, s)
		}
	}
	// The long-running processes: every service's serve, two relays per producer, the
	// auditor, and the servers they need.
	running := []string{"postgres", "rabbitmq", "auditor"}
	for _, s := range contracts.Services() {
		running = append(running, s.Name)
		if s.RelayAddr != "" {
			running = append(running, system.RelayName(s.Name), system.RelayName(s.Name)+"-2")
		}
	}
	for _, want := range running {
		if !slices.Contains(up, want) {
			t.Fatalf("docker compose config --services lists no %s among %v", want, up)
		}
	}
	step("docker compose build")
	compose(t, ctx, "build")
	step("docker compose up -d %s (not started, no image here: %v)", strings.Join(up, " "), e.skip)
	compose(t, ctx, append([]string{"up", "-d"}, up...)...)

	// Each migrate service must have exited 0 for its process to start, so every
	// process answering /readyz covers them too.
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, svc := range slices.Sorted(maps.Keys(e.ports)) {
		eventually(t, svc+" ready on "+e.ports[svc], func() string {
			resp, err := hc.Get("http://" + e.ports[svc] + "/readyz")
			if err != nil {
				return err.Error()
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Sprintf("/readyz answers %d", resp.StatusCode)
			}
			return ""
		})
	}
	eventually(t, "every process running", func() string {
		ps := strings.Fields(compose(t, ctx, "ps", "--services", "--status", "running"))
		for _, want := range running {
			if !slices.Contains(ps, want) {
				return want + " is not running"
			}
		}
		return ""
	})
	step("every process runs, each with a port answers /readyz")

	relay := system.RelayName(contracts.ProducerOrder)
	sys := &system.System{
		OrderAPI: &system.Process{Name: "order", Addr: e.ports["order"]},
		Relay:    &system.Process{Name: relay, Addr: e.ports[relay]},
		Stock:    &system.Process{Name: "stock", Addr: e.ports["stock"]},
		Shipping: &system.Process{Name: "shipping", Addr: e.ports["shipping"]},
		Auditor:  &system.Process{Name: "auditor", Addr: e.ports["auditor"]},
	}
	api := sys.Client()
	var placed []string
	placeOrders := func(n int) {
		t.Helper()
		for range n {
			o, err := api.CreateOrder(ctx, uuid.NewString(), []system.Line{{ProductID: uuid.NewString(), Quantity: "2.000"}})
			if err != nil {
				t.Fatalf("create an order through %s: %v", e.ports["order"], err)
			}
			if status, err := api.Place(ctx, o.ID); err != nil || status != http.StatusOK {
				t.Fatalf("place order %s: status %d, %v", o.ID, status, err)
			}
			placed = append(placed, o.ID)
		}
	}
	allShipped := func() string {
		for _, id := range placed {
			s, status, err := api.OrderStatus(ctx, id)
			if err != nil {
				return err.Error()
			}
			if status != http.StatusOK {
				return fmt.Sprintf("shipping has no status of order %s yet (%d)", id, status)
			}
			if s.Status != "confirmed" { // untracked products: stock confirms every order
				return fmt.Sprintf("shipping has order %s as %q", id, s.Status)
			}
		}
		return ""
	}

	placeOrders(20)
	eventually(t, "shipping has every order confirmed", allShipped)
	step("20 orders placed through %s reached shipping", e.ports["order"])

	livePage(t, e.ports["auditor"], placed[len(placed)-1])
	step("the live page on %s shows the last order published, applied by stock and by shipping", e.ports["auditor"])

	dbs, err := check.Open(ctx,
		"postgres://postgres@"+e.postgres+"/orders?sslmode=disable",
		"postgres://postgres@"+e.postgres+"/stock?sslmode=disable",
		"postgres://postgres@"+e.postgres+"/shipping?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer dbs.Close()
	ledger(t, ctx, api, dbs, len(placed))
	step("ledger: %d orders, 0 lost, 0 unaccounted", len(placed))

	step("docker compose run --rm demo")
	out := compose(t, ctx, "run", "--rm", "demo")
	if !strings.Contains(out, "unaccounted") {
		t.Fatalf("the demo exited 0 without the auditor's answer:\n%s", tail(out, 40))
	}
	step("the demo passed:\n%s", tail(out, 12))

	// Kill the leading relay of order (SIGKILL: no clean shutdown): the standby takes
	// over. Then kill the other too, keep placing orders while both are down, start
	// them again: every order still reaches both consumers.
	leads, err := sys.Relay.Metric(ctx, "relay_leader", nil)
	if err != nil {
		t.Fatal(err)
	}
	leader, standby := relay, relay+"-2"
	if leads == 0 {
		leader, standby = standby, leader
	}
	compose(t, ctx, "kill", leader)
	step("%s, the leading relay, killed", leader)
	placeOrders(20)
	eventually(t, "shipping has every order placed after the leading relay's crash", allShipped)
	step("%s took over: 20 more orders reached shipping", standby)
	compose(t, ctx, "kill", standby)
	step("%s killed too", standby)
	placeOrders(20)
	time.Sleep(2 * time.Second)
	if msg := allShipped(); msg == "" {
		t.Fatal("every order reached shipping while both relays were down: the kill did not stop them")
	}
	compose(t, ctx, "start", leader, standby)
	step("both relays started again")
	placeOrders(20)
	eventually(t, "shipping has every order placed before, during and after the relay crashes", allShipped)
	ledger(t, ctx, api, dbs, len(placed))
	step("ledger after the relay crashes: %d orders, 0 lost, 0 unaccounted", len(placed))
}

// ledger waits until every published event has been audited and the database
// invariants hold, then fails the test unless nothing is lost or unaccounted.
func ledger(t *testing.T, ctx context.Context, api *system.Client, dbs check.DBs, orders int) {
	t.Helper()
	r, err := check.Eventually(ctx, dbs, settle)
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	if !r.OK() || r.Lost != 0 {
		t.Fatalf("ledger: %d lost; invariants broken:\n%s", r.Lost, r)
	}
	if r.Orders["confirmed"] != orders || r.OutboxPublished != r.OutboxEvents {
		t.Fatalf("ledger: %d confirmed orders and %d of %d outbox events published, want %d confirmed and all published",
			r.Orders["confirmed"], r.OutboxPublished, r.OutboxEvents, orders)
	}
	var published int64 // the auditor walks order's outbox
	if err := dbs.Order.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`).Scan(&published); err != nil {
		t.Fatalf("ledger: %v", err)
	}
	eventually(t, "the auditor has checked every published event", func() string {
		a, err := api.Audit(ctx)
		switch {
		case err != nil:
			return err.Error()
		case a.LastError != "":
			return "last cycle failed: " + a.LastError
		case a.Audited < published:
			return fmt.Sprintf("audited %d of %d published events", a.Audited, published)
		case a.UnaccountedTotal != 0:
			return fmt.Sprintf("%d unaccounted events: %+v", a.UnaccountedTotal, a.Events)
		}
		return ""
	})
}

// livePage opens the auditor's page in a headless Chromium and waits until the
// row of order id shows it published, applied by stock and by shipping.
func livePage(t *testing.T, addr, id string) {
	t.Helper()
	path := testkit.Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancelAlloc()
	browser, cancel := chromedp.NewContext(actx)
	defer cancel()
	wait, cancelWait := context.WithTimeout(browser, settle)
	defer cancelWait()
	cell := func(stage string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-order-id=%q] td[data-stage=%q][data-state="done"]`, id, stage)))
	}
	if err := chromedp.Do(wait, chromedp.Navigate("http://"+addr+"/"),
		cell("published"), cell("stock"), cell("shipping")); err != nil {
		html, _ := chromedp.Run(browser, chromedp.OuterHTML(chromedp.CSS("body")))
		t.Fatalf("the live page never showed order %s done: %v\n%s", id, err, tail(html, 30))
	}
}
