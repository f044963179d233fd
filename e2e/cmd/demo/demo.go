package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/check"
	"example.com/shop/e2e/internal/system"
)

// demo is one run: the system it started and what it has seen so far.
type demo struct {
	s      settings
	ui     *ui
	srv    servers
	sys    *system.System
	api    *system.Client
	dbs    check.DBs
	logs   []*os.File
	unlock func()              // releases the demo's lock on the PostgreSQL server (claimServer)
	env    map[string][]string // each process's own role and broker user (processEnv)

	first        system.Order // the order followed through every table
	raceProduct  string       // the product of 5 units the race is about
	raceWinners  []string     // the race's confirmed orders
	raceLosers   []string     // the race's rejected orders
	poisonSent   int          // poison messages published (each reaches both DLQs)
	dupsInjected int          // events republished by hand
	auditReport  system.AuditReport
}

// stop stops the processes, closes the pools and the log files.
func (d *demo) stop() {
	if d.sys != nil {
		_ = d.sys.Stop()
	}
	d.dbs.Close()
	for _, f := range d.logs {
		f.Close()
	}
	if d.unlock != nil {
		d.unlock()
	}
}

func (d *demo) run(ctx context.Context) error {
	d.ui.plain("shop demo: %s with their relays on real PostgreSQL and RabbitMQ", strings.Join(serviceNames(), ", "))
	steps := []struct {
		title string
		fn    func(context.Context) error
	}{
		{"check that PostgreSQL and RabbitMQ answer", d.servers},
		{"fresh databases and vhost", d.fresh},
		{"migrate every service's database", d.migrate},
		{"start every service, a relay per producer and the auditor", d.start},
		{"one order, followed through every service and back", d.oneOrder},
		{"20 orders placed by 8 clients at once", d.concurrent},
		{"double click: the same order placed twice at the same moment", d.doubleClick},
		{"cancel a confirmed order", d.cancel},
		{"a product with 5 units: 12 orders race for it", d.race},
		{"a cancel releases a unit, and a later order gets it", d.release},
		{"republish an event that was already delivered (a duplicate)", d.duplicate},
		{"a poison message goes to the dead-letter queues", d.poison},
		{"relay killed with SIGKILL in the middle of a batch", d.relayCrash},
		{"wait until everything has arrived, then check the invariants", d.settle},
		{"wait until the queues are drained and nothing is unacknowledged", d.drain},
		{"ask the auditor: did every published event reach every consumer?", d.audit},
		{"summary", d.summary},
	}
	d.ui.total = len(steps)
	for _, st := range steps {
		d.ui.step(st.title)
		if err := st.fn(ctx); err != nil {
			return err
		}
	}
	if d.s.keep {
		d.ui.plain("\nkept running (Ctrl-C stops it):")
		for _, p := range d.sys.All() {
			d.ui.plain("  %-11s http://%s   (/healthz /readyz /metrics)", p.Name, p.Addr)
		}
		d.ui.plain("  order API: POST http://%s/orders", d.sys.OrderAPI.Addr)
		d.ui.plain("  live page: http://%s/", d.sys.Auditor.Addr)
		d.ui.plain("  dead letters: STOCK_DATABASE_URL='%s' AMQP_URL='%s' bin/stock dlq list",
			d.srv.dbURLs[contracts.ConsumerStock], d.srv.amqpURL)
		<-ctx.Done()
	}
	d.ui.plain("stopping the processes")
	return nil
}

func (d *demo) servers(ctx context.Context) error {
	var dbs, hosts []string
	for _, svc := range contracts.Services() {
		dbs = append(dbs, d.s.dbServers[svc.Name])
		if h := hostOf(d.s.dbServers[svc.Name]); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	if err := ensureServers(ctx, d.ui.w, dbs, d.s.amqpURL); err != nil {
		return err
	}
	d.ui.say("PostgreSQL at %s and RabbitMQ at %s answer", strings.Join(hosts, ", "), hostOf(d.s.amqpURL))
	return nil
}

func (d *demo) fresh(ctx context.Context) error {
	var err error
	if d.unlock, err = claimServer(ctx, d.s.dbServers[contracts.ProducerOrder], demoLockKey); err != nil {
		return err
	}
	if d.srv.dbURLs, err = demoDatabases(d.s.dbServers); err != nil {
		return err
	}
	var urls, names []string
	for _, svc := range contracts.Services() {
		u := d.srv.dbURLs[svc.Name]
		if err := recreateDatabase(ctx, u); err != nil {
			return err
		}
		urls, names = append(urls, u), append(names, "demo_"+svc.Database)
	}
	d.ui.say("dropped %s (migrate creates them again)", strings.Join(names, ", "))
	if err := applyRoles(ctx, urls...); err != nil {
		return err
	}
	d.ui.say("applied %s: the roles the processes run as", rolesSQL)
	users, err := system.BrokerUsers(definitionsJSON)
	if err != nil {
		return err
	}
	if d.srv.amqpURL, d.srv.userURLs, d.srv.vhostNote, err = freshVhost(ctx, d.s.amqpURL, "shop-demo", users); err != nil {
		return fmt.Errorf("fresh vhost: %w", err)
	}
	d.ui.say("%s", d.srv.vhostNote)
	if d.srv.amqpURL == d.s.amqpURL {
		queues := []string{contracts.UnroutableQueue}
		for _, c := range contracts.Consumers() {
			queues = append(queues, c.Queue, c.DeadLetterQueue)
		}
		if err := purgeQueues(d.srv.amqpURL, queues...); err != nil {
			return err
		}
		d.ui.say("purged the demo's queues in that vhost")
	}
	return nil
}

func (d *demo) migrate(ctx context.Context) error {
	if err := os.MkdirAll(d.s.logDir, 0o755); err != nil {
		return err
	}
	roles, err := readRoles(rolesSQL)
	if err != nil {
		return err
	}
	if d.env, err = processEnv(d.srv.dbURLs, d.srv.userURLs, roles); err != nil {
		return err
	}
	auditor := map[string]string{}
	for name, u := range d.srv.dbURLs {
		auditor[name] = urlAs(u, "auditor")
	}
	sys, err := system.New(system.Config{
		BinDir:        d.s.binDir,
		DBURLs:        d.srv.dbURLs,
		AMQPURL:       d.srv.amqpURL,
		Addrs:         d.addrs(),
		Auditor:       true,
		AuditorDBURLs: auditor,
		ProcessEnv:    d.env,
		Env:           d.tracingEnv(),
	})
	if err != nil {
		return err
	}
	for _, p := range sys.All() {
		f, err := os.Create(filepath.Join(d.s.logDir, p.Name+".log"))
		if err != nil {
			return err
		}
		d.logs = append(d.logs, f)
		p.Log = f
	}
	if err := sys.Migrate(ctx); err != nil {
		return err
	}
	d.sys, d.api = sys, sys.Client()
	var done []string
	for _, svc := range contracts.Services() {
		done = append(done, "bin/"+svc.Name+" migrate")
	}
	d.ui.say("%s: done", strings.Join(done, ", "))
	d.dbs, err = check.OpenAll(ctx, d.srv.dbURLs)
	return err
}

// localCollector is where a local OpenTelemetry collector (or Jaeger) takes
// OTLP over HTTP.
const localCollector = "127.0.0.1:4318"

// tracingEnv points every process at a local OTLP collector when one answers
// on localCollector and OTEL_EXPORTER_OTLP_ENDPOINT is not set already (the
// processes inherit the demo's environment): the demo's orders then show up
// as traces, one per order, from the API call to both consumers.
func (d *demo) tracingEnv() []string {
	if d.s.otlpEndpoint != "" {
		d.ui.say("tracing: the processes export to %s (OTEL_EXPORTER_OTLP_ENDPOINT)", d.s.otlpEndpoint)
		return nil
	}
	conn, err := net.DialTimeout("tcp", localCollector, 300*time.Millisecond)
	if err != nil {
		d.ui.say("tracing: off, no collector answers on %s (docker compose up -d jaeger starts one)", localCollector)
		return nil
	}
	_ = conn.Close()
	d.ui.say("tracing: a collector answers on %s; the processes export their spans to it", localCollector)
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + localCollector}
}

// processEnv runs each process under its own role, as docker-compose.yml and
// deploy/k8s do: each service's serve as <service>_api when deploy/postgres/roles.sql
// (roles) has that role (order_api), else as <service>_app (stock_app), each relay
// as <producer>_relay (the auditor as auditor: AuditorDBURLs); and, with userURLs
// (a fresh vhost, by broker user), every relay and consumer as the broker user of
// its name, the consumers accepting each producer's events from its relay's user
// only (RELAY_USERS), and the auditor as the broker user auditor. The relays may not declare the consumers' queues then: the
// consumers declare them, and start before any order. It fails on a role roles
// lacks.
func processEnv(dbURLs, userURLs map[string]string, roles map[string]bool) (map[string][]string, error) {
	env := map[string][]string{
		// A short grace: the demo's events arrive within a second, and its
		// final question to the auditor should not wait long.
		"auditor": {"AUDIT_INTERVAL=500ms", "AUDIT_GRACE=3s"},
	}
	as := func(process, service, role string) error {
		if !roles[role] {
			return fmt.Errorf("%s: no role %s for %s", rolesSQL, role, process)
		}
		env[process] = append(env[process], dbVar(service)+"="+urlAs(dbURLs[service], role))
		return nil
	}
	for _, svc := range contracts.Services() {
		role := roleName(svc.Name) + "_api"
		if !roles[role] {
			role = roleName(svc.Name) + "_app"
		}
		if err := as(svc.Name, svc.Name, role); err != nil {
			return nil, err
		}
	}
	for _, p := range contracts.Producers() {
		relay := system.RelayName(p.Name)
		if err := as(relay, p.Name, roleName(p.Name)+"_relay"); err != nil {
			return nil, err
		}
		if userURLs != nil {
			env[relay] = append(env[relay], "AMQP_URL="+userURLs[relay], "RELAY_DECLARE_QUEUES=false")
		}
	}
	for _, c := range contracts.Consumers() {
		if userURLs != nil {
			env[c.Name] = append(env[c.Name], "AMQP_URL="+userURLs[c.Name], "RELAY_USERS="+contracts.RelayUsers())
		}
	}
	if userURLs != nil {
		env["auditor"] = append(env["auditor"], "AMQP_URL="+userURLs["auditor"])
	}
	return env, nil
}

// roleName is the prefix of a service's database roles: its name with "_" for "-".
func roleName(service string) string { return strings.ReplaceAll(service, "-", "_") }

// runsAs says which database role and broker user each of procs runs as, from
// its variables in env (processEnv): "order as order_api+order, ...".
func runsAs(procs []*system.Process, env map[string][]string) string {
	var out []string
	for _, p := range procs {
		var who []string
		for _, kv := range env[p.Name] {
			k, v, _ := strings.Cut(kv, "=")
			if u, err := url.Parse(v); (k == "AMQP_URL" || strings.HasSuffix(k, "_DATABASE_URL")) && err == nil && u.User != nil {
				who = append(who, u.User.Username())
			}
		}
		if p.Name == "auditor" {
			who = []string{"auditor (read-only)"}
		}
		if len(who) > 0 {
			out = append(out, p.Name+" as "+strings.Join(who, "+"))
		}
	}
	return strings.Join(out, ", ")
}

// standardAddrs are the ports the README's examples use: each service's and each
// relay's as the registry gives them (contracts.Service.HTTPAddr, RelayAddr), and the
// auditor's.
func standardAddrs() map[string]string {
	addrs := map[string]string{"auditor": "127.0.0.1:8085"}
	for _, svc := range contracts.Services() {
		addrs[svc.Name] = "127.0.0.1" + svc.HTTPAddr
		if svc.RelayAddr != "" {
			addrs[system.RelayName(svc.Name)] = "127.0.0.1" + svc.RelayAddr
		}
	}
	return addrs
}

// addrs returns the standard ports when the system is kept running and all
// of them are free, so that the README's curl examples work against it;
// otherwise nil (free ports chosen by the harness). A relay without a standard
// port gets a free one either way.
func (d *demo) addrs() map[string]string {
	if !d.s.keep {
		return nil
	}
	addrs := standardAddrs()
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			d.ui.say("port %s is taken, so the processes get free ports instead", addr)
			return nil
		}
		ln.Close()
	}
	return addrs
}

func (d *demo) start(ctx context.Context) error {
	if err := d.sys.Start(ctx, maxWait); err != nil {
		return err
	}
	for _, p := range d.sys.All() {
		d.ui.say("%-11s %-6s ready on http://%s", p.Name, p.Args[0], p.Addr)
	}
	d.ui.say("roles (PostgreSQL+RabbitMQ): %s", runsAs(d.sys.All(), d.env))
	d.ui.say("their logs: %s", filepath.Join(d.s.logDir, "*.log"))
	d.ui.say("live page: http://%s/  (open it now to watch the orders go by)", d.sys.Auditor.Addr)
	return nil
}

func newLines(n int) []system.Line {
	lines := make([]system.Line, n)
	for i := range lines {
		lines[i] = system.Line{ProductID: uuid.NewString(), Quantity: fmt.Sprintf("%d.000", i+2)}
	}
	return lines
}

// createAndPlace creates an order of n lines and places it.
func (d *demo) createAndPlace(ctx context.Context, n int) (system.Order, error) {
	o, err := d.api.CreateOrder(ctx, uuid.NewString(), newLines(n))
	if err != nil {
		return o, err
	}
	st, err := d.api.Place(ctx, o.ID)
	if err == nil && st != http.StatusOK {
		err = fmt.Errorf("place %s: status %d", o.ID, st)
	}
	return o, err
}

// waitFor polls cond every 20 ms until it returns "" or maxWait passes.
func waitFor(ctx context.Context, what string, cond func() string) error {
	deadline := time.Now().Add(maxWait)
	for {
		msg := cond()
		if msg == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not reached within %s: %s", what, maxWait, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (d *demo) reservations(ctx context.Context, id string, want int) error {
	return waitFor(ctx, "reservations of "+id, func() string {
		rs, err := d.api.Reservations(ctx, id)
		if err != nil {
			return err.Error()
		}
		if held := system.Held(rs); len(held) != want {
			return fmt.Sprintf("%d reservations held, want %d", len(held), want)
		}
		return ""
	})
}

func (d *demo) shipping(ctx context.Context, id, status string, version int) error {
	return waitFor(ctx, "shipping of "+id, func() string {
		st, code, err := d.api.OrderStatus(ctx, id)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("order-status: %d %v", code, err)
		}
		if st.Status != status || st.Version != version {
			return fmt.Sprintf("order-status %s v%d", st.Status, st.Version)
		}
		return ""
	})
}

func (d *demo) oneOrder(ctx context.Context) error {
	o, err := d.api.CreateOrder(ctx, uuid.NewString(), newLines(2))
	if err != nil {
		return err
	}
	d.ui.say("POST /orders                -> 201 order %s, %s v%d, %d lines", short(o.ID), o.Status, o.Version, len(o.Lines))
	st, err := d.api.Place(ctx, o.ID)
	if err != nil {
		return err
	}
	var eventID string
	_ = d.dbs.Order.QueryRow(ctx, `SELECT id::text FROM outbox WHERE envelope->'payload'->>'order_id' = $1`, o.ID).Scan(&eventID)
	d.ui.say("POST /orders/%s/place -> %d; the same transaction wrote outbox event %s", short(o.ID), st, short(eventID))
	if err := waitFor(ctx, "relay", func() string {
		var published bool
		_ = d.dbs.Order.QueryRow(ctx, `SELECT published_at IS NOT NULL FROM outbox WHERE id = $1`, eventID).Scan(&published)
		if !published {
			return "not published"
		}
		return ""
	}); err != nil {
		return err
	}
	d.ui.say("relay published it to %s (broker confirmed) and set published_at", contracts.Exchange)
	if err := d.reservations(ctx, o.ID, 2); err != nil {
		return err
	}
	d.ui.say("stock reserved its 2 lines (GET /reservations?order_id=...); its products are untracked, so always reservable")
	var answerID, answer string
	if err := waitFor(ctx, "stock's answer published", func() string {
		var published bool
		_ = d.dbs.Stock.QueryRow(ctx, `SELECT id::text, event_name, published_at IS NOT NULL FROM outbox
WHERE envelope->'payload'->>'order_id' = $1`, o.ID).Scan(&answerID, &answer, &published)
		if !published {
			return "not published"
		}
		return ""
	}); err != nil {
		return err
	}
	d.ui.say("the same transaction wrote stock's answer %s (%s) to stock's outbox; stock-relay published it", short(answerID), answer)
	got, err := d.order(ctx, o.ID, "confirmed")
	if err != nil {
		return err
	}
	d.ui.say("order consumed it from %s: GET /orders/%s -> %s v%d (and order.order.confirmed.v1 in its outbox)",
		contracts.QueueOrder, short(o.ID), got.Status, got.Version)
	if err := d.shipping(ctx, o.ID, "confirmed", 3); err != nil {
		return err
	}
	sh, _, err := d.api.Shipment(ctx, o.ID)
	if err != nil {
		return err
	}
	d.ui.say("shipping: order-status confirmed v3, shipment %s", sh.Status)
	d.first = o
	return nil
}

// order waits until the order API shows order id at status and returns it.
func (d *demo) order(ctx context.Context, id, status string) (system.Order, error) {
	var o system.Order
	err := waitFor(ctx, "order "+id+" "+status, func() string {
		var err error
		if o, _, err = d.api.Order(ctx, id); err != nil {
			return err.Error()
		}
		if o.Status != status {
			return "order is " + o.Status
		}
		return ""
	})
	return o, err
}

// placeMany creates and places n orders with the given number of clients,
// calling progress (if not nil) after each one.
func (d *demo) placeMany(ctx context.Context, n, clients int, progress func(placed int)) ([]string, error) {
	var next, placed atomic.Int64
	var mu sync.Mutex
	var ids []string
	var errs []error
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				o, err := d.createAndPlace(ctx, 2)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ids = append(ids, o.ID)
				}
				mu.Unlock()
				if err != nil {
					return
				}
				p := placed.Add(1)
				if progress != nil {
					progress(int(p))
				}
			}
		})
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

func (d *demo) concurrent(ctx context.Context) error {
	start := time.Now()
	ids, err := d.placeMany(ctx, 20, 8, nil)
	if err != nil {
		return err
	}
	d.ui.say("20 orders created and placed in %s", fmtDur(time.Since(start)))
	for _, id := range ids {
		if err := d.reservations(ctx, id, 2); err != nil {
			return err
		}
	}
	d.ui.say("stock reserved all 40 lines")
	for _, id := range ids {
		if _, err := d.order(ctx, id, "confirmed"); err != nil {
			return err
		}
	}
	d.ui.say("and confirmed all 20 orders")
	return nil
}

func (d *demo) doubleClick(ctx context.Context) error {
	o, err := d.api.CreateOrder(ctx, uuid.NewString(), newLines(2))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	errs := make([]error, 2)
	gate := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			<-gate
			statuses[i], errs[i] = d.api.Place(ctx, o.ID)
		})
	}
	close(gate)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	sort.Ints(statuses)
	d.ui.say("two concurrent POST /orders/%s/place -> %d and %d", short(o.ID), statuses[0], statuses[1])
	if statuses[0] != http.StatusOK || statuses[1] != http.StatusConflict {
		return fmt.Errorf("double click answered %v, want 200 and 409", statuses)
	}
	if err := d.reservations(ctx, o.ID, 2); err != nil {
		return err
	}
	var events int
	_ = d.dbs.Order.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE envelope->'payload'->>'order_id' = $1 AND event_name = $2`,
		o.ID, contracts.EventOrderPlaced).Scan(&events)
	d.ui.say("the loser waited on SELECT ... FOR UPDATE, then saw 'placed': %d placed event, 2 reservations", events)
	return nil
}

func (d *demo) cancel(ctx context.Context) error {
	o := d.first
	st, err := d.api.Cancel(ctx, o.ID)
	if err != nil {
		return err
	}
	got, _, err := d.api.Order(ctx, o.ID)
	if err != nil {
		return err
	}
	d.ui.say("POST /orders/%s/cancel -> %d, order %s v%d", short(o.ID), st, got.Status, got.Version)
	if err := d.reservations(ctx, o.ID, 0); err != nil {
		return err
	}
	d.ui.say("stock released its reservations (GET /reservations shows them with status released)")
	if err := d.shipping(ctx, o.ID, "cancelled", 4); err != nil {
		return err
	}
	sh, _, err := d.api.Shipment(ctx, o.ID)
	if err != nil {
		return err
	}
	d.ui.say("shipping: order-status cancelled v4, shipment %s", sh.Status)
	return nil
}

// productStock says a product's stock in one line.
func (d *demo) productStock(ctx context.Context, id string) string {
	ps, err := d.api.Stock(ctx, id)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("on hand %s, reserved %s, available %s", ps.OnHand, ps.Reserved, ps.Available)
}

// answered waits until order id is confirmed or rejected and returns it.
func (d *demo) answered(ctx context.Context, id string) (system.Order, error) {
	var o system.Order
	err := waitFor(ctx, "stock's answer to "+id, func() string {
		var err error
		if o, _, err = d.api.Order(ctx, id); err != nil {
			return err.Error()
		}
		if o.Status != "confirmed" && o.Status != "rejected" {
			return "order is " + o.Status
		}
		return ""
	})
	return o, err
}

func (d *demo) race(ctx context.Context) error {
	const units, orders = 5, 12
	d.raceProduct = uuid.NewString()
	if err := d.api.PutStock(ctx, d.raceProduct, fmt.Sprintf("%d", units)); err != nil {
		return err
	}
	d.ui.say(`PUT /products/%s/stock {"on_hand": "%d"} -> %s`, short(d.raceProduct), units, d.productStock(ctx, d.raceProduct))
	drafts := make([]system.Order, orders)
	for i := range drafts {
		o, err := d.api.CreateOrder(ctx, uuid.NewString(), []system.Line{{ProductID: d.raceProduct, Quantity: "1"}})
		if err != nil {
			return err
		}
		drafts[i] = o
	}
	statuses := make([]int, orders)
	errs := make([]error, orders)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, o := range drafts {
		wg.Go(func() {
			<-gate
			statuses[i], errs[i] = d.api.Place(ctx, o.ID)
		})
	}
	close(gate)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, st := range statuses {
		if st != http.StatusOK {
			return fmt.Errorf("place %s: status %d", drafts[i].ID, st)
		}
	}
	d.ui.say("%d orders of 1 unit each, placed by %d clients at the same moment: all 200, all placed", orders, orders)
	for _, o := range drafts {
		got, err := d.answered(ctx, o.ID)
		if err != nil {
			return err
		}
		if got.Status == "confirmed" {
			d.raceWinners = append(d.raceWinners, o.ID)
			continue
		}
		d.raceLosers = append(d.raceLosers, o.ID)
		why := "no reason kept"
		if r := got.Rejection; r != nil {
			why = r.Reason
			for _, l := range r.Lines {
				why += fmt.Sprintf(" (product %s: requested %s, available %s)", short(l.ProductID.String()), l.Requested, l.Available)
			}
		}
		d.ui.say("  order %s rejected v%d: %s", short(o.ID), got.Version, why)
	}
	d.ui.say("stock answered all %d: %d confirmed, %d rejected; the product: %s",
		orders, len(d.raceWinners), len(d.raceLosers), d.productStock(ctx, d.raceProduct))
	if len(d.raceWinners) != units || len(d.raceLosers) != orders-units {
		return fmt.Errorf("the race ended with %d confirmed and %d rejected, want %d and %d",
			len(d.raceWinners), len(d.raceLosers), units, orders-units)
	}
	d.ui.say("never oversold: stock locks the product's row, so each order saw what the ones before it held")
	return nil
}

func (d *demo) release(ctx context.Context) error {
	loser := d.raceLosers[0]
	st, err := d.api.Cancel(ctx, loser)
	if err != nil {
		return err
	}
	d.ui.say("POST /orders/%s/cancel -> %d: a rejected order has nothing to cancel", short(loser), st)
	if st != http.StatusConflict {
		return fmt.Errorf("cancel of rejected order %s answered %d, want 409", loser, st)
	}
	winner := d.raceWinners[0]
	if st, err = d.api.Cancel(ctx, winner); err != nil {
		return err
	}
	got, _, err := d.api.Order(ctx, winner)
	if err != nil {
		return err
	}
	d.ui.say("POST /orders/%s/cancel -> %d, order %s v%d", short(winner), st, got.Status, got.Version)
	if err := waitFor(ctx, "the unit released", func() string {
		if ps, err := d.api.Stock(ctx, d.raceProduct); err != nil || ps.Available != "1.000" {
			return fmt.Sprintf("%+v %v", ps, err)
		}
		return ""
	}); err != nil {
		return err
	}
	d.ui.say("stock consumed the cancel and released its unit: %s", d.productStock(ctx, d.raceProduct))
	later, err := d.api.CreateOrder(ctx, uuid.NewString(), []system.Line{{ProductID: d.raceProduct, Quantity: "1"}})
	if err != nil {
		return err
	}
	if st, err := d.api.Place(ctx, later.ID); err != nil || st != http.StatusOK {
		return fmt.Errorf("place %s: status %d, err %v", later.ID, st, err)
	}
	got, err = d.answered(ctx, later.ID)
	if err != nil {
		return err
	}
	d.ui.say("a later order %s for 1 unit -> %s v%d; the product: %s", short(later.ID), got.Status, got.Version, d.productStock(ctx, d.raceProduct))
	if got.Status != "confirmed" {
		return fmt.Errorf("the later order %s is %s, want confirmed with the released unit", later.ID, got.Status)
	}
	if err := d.shipping(ctx, later.ID, "confirmed", 3); err != nil {
		return err
	}
	d.ui.say("shipping: order-status confirmed v3, shipment ready")
	return nil
}

// duplicates returns inbox_duplicates_total of every consumer, by name.
func (d *demo) duplicates(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	for _, c := range contracts.Consumers() {
		n, err := d.sys.Process(c.Name).Metric(ctx, "inbox_duplicates_total", nil)
		if err != nil {
			return nil, err
		}
		out[c.Name] = n
	}
	return out, nil
}

// serviceNames returns the names of contracts.Services.
func serviceNames() []string {
	var names []string
	for _, svc := range contracts.Services() {
		names = append(names, svc.Name)
	}
	return names
}

// consumerNames returns the names of cs.
func consumerNames(cs []contracts.Consumer) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

func (d *demo) duplicate(ctx context.Context) error {
	var id, name, body string
	if err := d.dbs.Order.QueryRow(ctx, `SELECT id::text, event_name, envelope::text FROM outbox
WHERE envelope->'payload'->>'order_id' = $1 AND event_name = $2`, d.first.ID, contracts.EventOrderPlaced).Scan(&id, &name, &body); err != nil {
		return fmt.Errorf("read the event: %w", err)
	}
	var keysBefore int
	_ = d.dbs.Stock.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&keysBefore)
	before, err := d.duplicates(ctx)
	if err != nil {
		return err
	}
	// As order's relay would send it again: the consumers accept an event only
	// from its producer's relay user (RELAY_USERS).
	asRelay, who := d.srv.amqpURL, ""
	if u := d.srv.userURLs; u != nil {
		relay := system.RelayName(contracts.ProducerOrder)
		asRelay, who = u[relay], " as "+relay
	}
	if err := system.Publish(ctx, asRelay, contracts.Exchange, name, id, []byte(body)); err != nil {
		return err
	}
	d.dupsInjected++
	d.ui.say("published event %s (%s of order %s) to %s again%s, by hand", short(id), name, short(d.first.ID), contracts.Exchange, who)
	receivers := contracts.ConsumersOf(name)
	var after map[string]float64
	if err := waitFor(ctx, "duplicate counted", func() string {
		if after, err = d.duplicates(ctx); err != nil {
			return err.Error()
		}
		for _, c := range receivers {
			if after[c.Name] <= before[c.Name] {
				return c.Name + " has not counted it yet"
			}
		}
		return ""
	}); err != nil {
		return err
	}
	var keysAfter int
	_ = d.dbs.Stock.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&keysAfter)
	rs, err := d.api.Reservations(ctx, d.first.ID)
	if err != nil {
		return err
	}
	rs = system.Held(rs)
	var counts []string
	for _, c := range receivers {
		counts = append(counts, fmt.Sprintf("%s %v -> %v", c.Name, before[c.Name], after[c.Name]))
	}
	d.ui.say("%s found its event_id in processed_event and skipped it", strings.Join(consumerNames(receivers), ", "))
	d.ui.say("inbox_duplicates_total: %s", strings.Join(counts, ", "))
	d.ui.say("stock processed_event rows %d -> %d; the cancelled order still holds %d reservations", keysBefore, keysAfter, len(rs))
	return nil
}

func (d *demo) poison(ctx context.Context) error {
	body := `{"event_id":"not-a-uuid","event_name":"order.order.placed.v1","payload":{"order_id":42}}`
	if err := system.Publish(ctx, d.srv.amqpURL, contracts.Exchange, contracts.EventOrderPlaced, "poison-1", []byte(body)); err != nil {
		return err
	}
	d.poisonSent++
	d.ui.say("published a message with routing key %s whose body fails the schema", contracts.EventOrderPlaced)
	receivers := contracts.ConsumersOf(contracts.EventOrderPlaced)
	var dlqs []string
	for _, c := range receivers {
		dlqs = append(dlqs, c.DeadLetterQueue)
	}
	var depths map[string]int
	if err := waitFor(ctx, "dead-lettered", func() string {
		var err error
		if depths, err = system.QueueDepths(ctx, d.srv.amqpURL, dlqs...); err != nil {
			return err.Error()
		}
		for _, q := range dlqs {
			if depths[q] < d.poisonSent {
				return fmt.Sprint(depths)
			}
		}
		return ""
	}); err != nil {
		return err
	}
	var got []string
	for _, q := range dlqs {
		got = append(got, fmt.Sprintf("%s %d", q, depths[q]))
	}
	d.ui.say("every consumer of %s rejected it at once, no retry loop: %s", contracts.EventOrderPlaced, strings.Join(got, ", "))
	return nil
}

func (d *demo) counts(ctx context.Context) (published, unpublished, stockKeys int) {
	_ = d.dbs.Order.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NOT NULL), count(*) FILTER (WHERE published_at IS NULL) FROM outbox`).Scan(&published, &unpublished)
	_ = d.dbs.Stock.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&stockKeys)
	return
}

func (d *demo) relayCrash(ctx context.Context) error {
	n := d.s.orders
	if err := d.sys.Relay.Stop(10 * time.Second); err != nil {
		return err
	}
	d.ui.say("relay stopped (SIGTERM), so that a batch piles up in the outbox")
	every := max(n/5, 1)
	if _, err := d.placeMany(ctx, n, 8, func(p int) {
		if p%every == 0 {
			d.ui.say("placed %d/%d orders", p, n)
		}
	}); err != nil {
		return err
	}
	pub0, backlog, keys0 := d.counts(ctx)
	d.ui.say("outbox: %d waiting (and %d published by the steps before)", backlog, pub0)

	if err := d.sys.Relay.Start(); err != nil {
		return err
	}
	// Kill it as soon as stock has seen part of the batch, before the relay
	// can mark the whole batch published.
	deadline := time.Now().Add(maxWait)
	var pub, keys int
	for time.Now().Before(deadline) {
		pub, _, keys = d.counts(ctx)
		if keys > keys0 || pub > pub0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := d.sys.Relay.Kill(); err != nil {
		return err
	}
	pubK, _, keysK := d.counts(ctx)
	d.ui.say("relay started, then killed with SIGKILL mid-batch: %d of the %d waiting rows marked published, %d of their events processed by stock at that moment "+
		"(the broker still holds more of what it took); the unmarked rows are sent again after the restart, and each copy stock gets twice is a duplicate the inbox skips (the summary counts them)",
		pubK-pub0, backlog, keysK-keys0)
	time.Sleep(500 * time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	if err := d.sys.Relay.Start(); err != nil {
		return err
	}
	if err := d.sys.Relay.WaitReady(rctx); err != nil {
		return err
	}
	d.ui.say("relay restarted; it publishes again whatever has no published_at")
	last := time.Now()
	return waitFor(ctx, "backlog published", func() string {
		pub, left, keys := d.counts(ctx)
		if time.Since(last) > time.Second {
			last = time.Now()
			d.ui.say("outbox published %d, waiting %d; stock processed %d", pub, left, keys)
		}
		if left > 0 {
			return fmt.Sprintf("%d unpublished", left)
		}
		return ""
	})
}

func (d *demo) settle(ctx context.Context) error {
	r, err := check.Eventually(ctx, d.dbs, maxWait)
	if err != nil {
		return err
	}
	if !r.OK() {
		d.ui.say("invariants still broken after %s:", maxWait)
		for _, p := range strings.Split(r.String(), "\n") {
			d.ui.say("  %s", p)
		}
		return nil // the summary reports and fails
	}
	d.ui.say("no order is left placed: each is confirmed, rejected or cancelled; every confirmed order has")
	d.ui.say("each line reserved exactly once, no rejected or cancelled order holds any, no product is oversold")
	d.ui.say("(held = reserved <= on hand); shipping has every order at the order's own version, ready exactly")
	d.ui.say("for the confirmed ones; every outbox is all published, and every consumer processed each event")
	d.ui.say("it receives exactly once")
	return nil
}

func (d *demo) summary(ctx context.Context) error {
	r, err := check.Invariants(ctx, d.dbs)
	if err != nil {
		return err
	}
	queues := []string{contracts.UnroutableQueue}
	var queueNames []string
	for _, c := range contracts.Consumers() {
		queues = append(queues, c.Queue, c.DeadLetterQueue)
		queueNames = append(queueNames, c.Queue)
	}
	depths, err := system.QueueDepths(ctx, d.srv.amqpURL, queues...)
	if err != nil {
		return err
	}
	dups, err := d.duplicates(ctx)
	if err != nil {
		return err
	}
	dead, queued, dupTotal := 0, 0, 0.0
	var perConsumer []row
	var dupNotes, deadNotes []string
	for _, c := range contracts.Consumers() {
		dead += depths[c.DeadLetterQueue]
		queued += depths[c.Queue]
		dupTotal += dups[c.Name]
		dupNotes = append(dupNotes, fmt.Sprintf("%s %.0f", c.Name, dups[c.Name]))
		deadNotes = append(deadNotes, fmt.Sprintf("%s %d", c.Name, depths[c.DeadLetterQueue]))
		perConsumer = append(perConsumer, row{"events processed by " + c.Name, itoa(r.Processed[c.Name]),
			fmt.Sprintf("%.0f duplicates skipped, %d dead-lettered, %d still queued; processed_event keys of %s",
				dups[c.Name], depths[c.DeadLetterQueue], depths[c.Queue], eventsNote(c.Events))})
	}
	poisoned := len(contracts.ConsumersOf(contracts.EventOrderPlaced))
	var byProducer []string
	for _, p := range contracts.Producers() {
		n := 0
		for _, e := range p.Events {
			n += r.Events[e]
		}
		byProducer = append(byProducer, fmt.Sprintf("%s %d", p.Name, n))
	}
	written := strings.Join(byProducer, ", ")
	lost := r.Lost + (r.OutboxEvents - r.OutboxPublished)
	var reasons []string
	for reason, n := range r.Rejections {
		reasons = append(reasons, fmt.Sprintf("%d %s", n, reason))
	}
	sort.Strings(reasons)
	verdict := "OK"
	if !r.OK() {
		verdict = fmt.Sprintf("FAILED (%d)", len(r.Problems)+r.MoreProblems)
	}
	rows := []row{
		{"orders placed", itoa(r.Placed()), "every order that left draft"},
		{"orders confirmed", itoa(r.Orders["confirmed"]), "stock held every line"},
		{"orders rejected", itoa(r.Orders["rejected"]), strings.Join(reasons, ", ")},
		{"orders cancelled", itoa(r.Orders["cancelled"]), "confirmed (or placed), then cancelled"},
		{"orders still placed", itoa(r.Orders["placed"]), "waiting for stock's answer"},
		{"events written (outboxes)", itoa(r.OutboxEvents), written},
		{"events published", itoa(r.OutboxPublished), "confirmed by the broker, published_at set"},
	}
	rows = append(rows, perConsumer...)
	rows = append(rows, []row{
		{"reservations held", itoa(r.ReservedLines), "the lines of the confirmed orders"},
		{"tracked products", itoa(r.Products), "none oversold: held = reserved <= on hand"},
		{"shipments", fmt.Sprintf("%d", r.Shipments["pending"]+r.Shipments["ready"]+r.Shipments["cancelled"]),
			fmt.Sprintf("%d pending, %d ready, %d cancelled", r.Shipments["pending"], r.Shipments["ready"], r.Shipments["cancelled"])},
		{"duplicates skipped", fmt.Sprintf("%.0f", dupTotal), strings.Join(dupNotes, " + ")},
		{"", "", duplicatesNote(dups, d.dupsInjected)},
		{"dead-lettered", itoa(dead), fmt.Sprintf("%s: the poison message, once per consumer of %s (%d sent)",
			strings.Join(deadNotes, " + "), contracts.EventOrderPlaced, d.poisonSent)},
		{"unroutable", itoa(depths[contracts.UnroutableQueue]), contracts.UnroutableQueue},
		{"still queued", itoa(queued), strings.Join(queueNames, " + ")},
		{"double reservations", itoa(r.DoubleReserved), ""},
		{"events applied twice", itoa(r.AppliedTwice), "an answer given or applied twice"},
		{"lost", itoa(lost), "events never published or never processed"},
		{"unaccounted (auditor)", itoa(d.auditReport.UnaccountedTotal), fmt.Sprintf("GET /audit after checking %d published events", d.auditReport.Audited)},
		{"invariants", verdict, ""},
	}...)
	d.ui.table(rows)
	var errs []error
	if !r.OK() {
		errs = append(errs, fmt.Errorf("invariants broken:\n%s", r))
	}
	if d.auditReport.UnaccountedTotal != 0 {
		errs = append(errs, fmt.Errorf("the auditor finds %d unaccounted events", d.auditReport.UnaccountedTotal))
	}
	if lost != 0 || queued != 0 {
		errs = append(errs, fmt.Errorf("%d events lost, %d still queued", lost, queued))
	}
	if dead != poisoned*d.poisonSent {
		errs = append(errs, fmt.Errorf("%d messages dead-lettered, want %d (the poison messages only)", dead, poisoned*d.poisonSent))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w\nthe processes' logs are in %s", err, d.s.logDir)
	}
	d.ui.plain("\n  lost = 0, unaccounted = 0, no double reservation, nothing applied twice, nothing oversold. Logs: %s",
		filepath.Join(d.s.logDir, "*.log"))
	return nil
}

// eventsNote names events without their producer and version:
// "order placed, order cancelled" for order.order.placed.v1 and order.order.cancelled.v1.
func eventsNote(events []string) string {
	var out []string
	for _, e := range events {
		parts := strings.Split(e, ".")
		if len(parts) == 4 {
			e = parts[1] + " " + parts[2]
		}
		out = append(out, e)
	}
	return strings.Join(out, ", ")
}

func itoa(n int) string { return fmt.Sprintf("%d", n) }

// short abbreviates a UUID to its last 8 characters for the step lines.
func short(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}
