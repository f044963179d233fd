// Package fault runs the shop's real binaries with every connection to
// PostgreSQL and RabbitMQ going through an in-process Toxiproxy, raises
// faults on them (network toxics, database and broker outages, signals),
// drives load, and checks the ledger across every service's database afterwards.
// The fault-injection tests of the e2e suite and `make chaos` both use it.
package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/check"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/platform/backoff"
)

// Config says where the binaries are and which databases and broker the rig
// runs on. The URLs are the direct ones; the rig routes each process through
// its own proxies, except a URL naming several hosts (PostgreSQL) or an
// AMQP_URL listing several nodes, which the processes get as it is.
type Config struct {
	BinDir     string
	DBURLs     map[string]string                                         // each service's database, by name, for every service of the registry
	AMQPURL    string                                                    // may name a vhost
	Ctl        func(ctx context.Context, args ...string) (string, error) // rabbitmqctl on the broker of AMQPURL
	Vhost      string                                                    // vhost of AMQPURL, for Ctl's -p
	Env        []string                                                  // KEY=VALUE added to every process
	ProcessEnv map[string][]string                                       // KEY=VALUE added to one process
	Log        io.Writer                                                 // the processes' output, prefixed (writes are serialised); nil keeps it in memory
	Auditor    bool                                                      // run the auditor too, on the direct URLs
	// Replicas adds more copies of a process (system.Config.Replicas): they get
	// the URLs as they are, through no proxy, and are in no list of Processes.
	Replicas map[string]int
}

// upstreams returns the processes that reach PostgreSQL and RabbitMQ through
// proxies, each with the service whose database it uses: every service of the
// registry, every producer's relay ("<producer>-relay") and order's standby
// relay ("standby"). The proxies are named <process>-pg and <process>-amqp.
func upstreams() map[string]string {
	procs := map[string]string{"standby": contracts.ProducerOrder}
	for _, s := range contracts.Services() {
		procs[s.Name] = s.Name
		if len(s.Publishes) > 0 {
			procs[system.RelayName(s.Name)] = s.Name
		}
	}
	return procs
}

// Rig is one running shop (order API, leader and standby relay, stock,
// shipping) behind proxies, with the pools the ledger reads.
type Rig struct {
	Sys *system.System
	Net *Net
	DBs check.DBs
	API *system.Client
	cfg Config

	procs    map[string]string // the processes behind proxies, each with its service (upstreams)
	placed   atomic.Int64      // orders the load driver saw placed
	vanished atomic.Int64      // orders acknowledged created, gone when placed

	mu         sync.Mutex
	placedIDs  []string // the orders the load driver saw placed
	dupsBefore float64  // duplicates counted by consumer processes since replaced
	dupsLedger int      // duplicates already reported by an earlier ledger
	stall      time.Duration
	stopWatch  context.CancelFunc
	watchDone  chan struct{}
}

// New routes every process through its proxies, migrates every service's
// database and opens the ledger's pools; nothing runs yet (see Start).
func New(ctx context.Context, cfg Config) (*Rig, error) {
	if cfg.Log != nil {
		cfg.Log = &syncWriter{w: cfg.Log}
	}
	r := &Rig{Net: NewNet(), cfg: cfg}
	penv := map[string][]string{}
	procs := upstreams()
	r.procs = procs
	for proc, service := range procs {
		svc := contracts.MustService(service)
		for _, up := range []string{"pg", "amqp"} {
			name := proc + "-" + up
			target, key := cfg.DBURLs[service], svc.EnvPrefix()+"DATABASE_URL"
			if up == "amqp" {
				target, key = cfg.AMQPURL, "AMQP_URL"
			}
			if strings.Contains(target, ",") { // several hosts or nodes: direct, no proxy
				penv[proc] = append(penv[proc], key+"="+target)
				continue
			}
			routed, err := r.Net.Route(name, target)
			if err != nil {
				r.Net.Close()
				return nil, err
			}
			penv[proc] = append(penv[proc], key+"="+routed)
		}
		penv[proc] = append(penv[proc], cfg.ProcessEnv[proc]...)
	}
	for proc, env := range cfg.ProcessEnv {
		if _, ok := procs[proc]; !ok { // the auditor
			penv[proc] = env
		}
	}
	sys, err := system.New(system.Config{
		BinDir:     cfg.BinDir,
		DBURLs:     cfg.DBURLs,
		AMQPURL:    cfg.AMQPURL,
		Env:        cfg.Env,
		ProcessEnv: penv,
		Standby:    true,
		Auditor:    cfg.Auditor,
		Log:        cfg.Log,
		Replicas:   cfg.Replicas,
	})
	if err != nil {
		r.Net.Close()
		return nil, err
	}
	r.Sys, r.API = sys, sys.Client()
	if err := sys.Migrate(ctx); err != nil {
		r.Net.Close()
		return nil, err
	}
	if r.DBs, err = check.OpenAll(ctx, cfg.DBURLs); err != nil {
		r.Net.Close()
		return nil, err
	}
	return r, nil
}

// Start starts the relay first (so that it is the leader), then the other
// processes, waits until every one answers /readyz 200 within timeout, and
// starts watching for stalls.
func (r *Rig) Start(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := r.Sys.Relay.Start(); err != nil {
		return err
	}
	if err := r.Sys.Relay.WaitReady(ctx); err != nil {
		return err
	}
	for _, p := range r.Sys.All() {
		if p == r.Sys.Relay {
			continue
		}
		if err := p.Start(); err != nil {
			return err
		}
	}
	for _, p := range r.Sys.All() {
		if err := p.WaitReady(ctx); err != nil {
			return err
		}
	}
	wctx, stop := context.WithCancel(context.Background())
	r.stopWatch, r.watchDone = stop, make(chan struct{})
	go r.watch(wctx)
	return nil
}

// Close stops every process (SIGCONT first, in case one is frozen), the
// proxies and the pools.
func (r *Rig) Close() error {
	if r.stopWatch != nil {
		r.stopWatch()
		<-r.watchDone
	}
	for _, p := range r.Sys.All() {
		_ = p.Signal(syscall.SIGCONT)
	}
	err := r.Sys.Stop()
	r.Net.Close()
	r.DBs.Close()
	return err
}

// Processes returns the names of the processes behind proxies (a service, a
// "<producer>-relay", "standby"), sorted.
func (r *Rig) Processes() []string {
	return slices.Sorted(maps.Keys(r.procs))
}

// Proxies returns the names of every proxy, "<process>-pg" and "<process>-amqp"
// for each of Processes.
func (r *Rig) Proxies() []string {
	var out []string
	for _, p := range r.Processes() {
		out = append(out, p+"-pg", p+"-amqp")
	}
	return out
}

// ServiceOf returns the service whose database the process behind proxy (or the
// process itself) uses, or "" for none.
func (r *Rig) ServiceOf(proxy string) string {
	proc := strings.TrimSuffix(strings.TrimSuffix(proxy, "-pg"), "-amqp")
	return r.procs[proc]
}

// Process returns the process called name (a service, a "<producer>-relay",
// "standby", "auditor"), or nil.
func (r *Rig) Process(name string) *system.Process {
	for _, p := range r.Sys.All() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ReplayOutbox runs `<producer> replay-outbox` over [since, until], for every
// producer of the registry, with its relay's environment (its database), and
// returns what they printed; the relays publish the rows again and the inboxes
// skip what was applied (docs/operations.md).
func (r *Rig) ReplayOutbox(ctx context.Context, since, until time.Time) (string, error) {
	var out strings.Builder
	for _, p := range contracts.Producers() {
		relay := r.Process(system.RelayName(p.Name))
		if relay == nil {
			return out.String(), fmt.Errorf("replay: no relay process for producer %s", p.Name)
		}
		cmd := exec.CommandContext(ctx, relay.Bin, "replay-outbox",
			"--since", since.UTC().Format(time.RFC3339Nano), "--until", until.UTC().Format(time.RFC3339Nano))
		cmd.Env = append(os.Environ(), relay.Env...)
		b, err := cmd.CombinedOutput()
		out.Write(b)
		if err != nil {
			return out.String(), fmt.Errorf("%s replay-outbox: %w", p.Name, err)
		}
	}
	return out.String(), nil
}

// Leader returns the relay process whose relay_leader gauge is 1, waiting
// up to timeout for one.
func (r *Rig) Leader(ctx context.Context, timeout time.Duration) (*system.Process, error) {
	deadline := time.Now().Add(timeout)
	for {
		for _, p := range []*system.Process{r.Sys.Relay, r.Sys.Standby} {
			if v, err := p.Metric(ctx, "relay_leader", nil); err == nil && v == 1 {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no relay reports relay_leader 1 within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL to p, then starts it again (as a supervisor would) and
// waits until it is ready.
func (r *Rig) Kill(ctx context.Context, p *system.Process, timeout time.Duration) error {
	r.countDuplicates(ctx, p)
	if err := p.Kill(); err != nil {
		return err
	}
	return r.Sys.Restart(ctx, p, timeout)
}

// Term sends SIGTERM to p and waits up to grace for it to exit (SIGKILL
// after that, reported as an error). It returns how long the shutdown took.
// Start p again with Restart.
func (r *Rig) Term(ctx context.Context, p *system.Process, grace time.Duration) (time.Duration, error) {
	r.countDuplicates(ctx, p)
	start := time.Now()
	if err := p.Stop(grace); err != nil {
		return 0, err
	}
	took := time.Since(start)
	if took >= grace {
		return took, fmt.Errorf("%s did not exit within %s of SIGTERM", p.Name, grace)
	}
	return took, nil
}

// Restart starts p again after Term or a crash and waits up to timeout until
// it is ready.
func (r *Rig) Restart(ctx context.Context, p *system.Process, timeout time.Duration) error {
	return r.Sys.Restart(ctx, p, timeout)
}

// Freeze sends SIGSTOP to p, waits d (or until ctx ends), then SIGCONT.
func (r *Rig) Freeze(ctx context.Context, p *system.Process, d time.Duration) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	_ = backoff.Sleep(ctx, d) // thaw early when ctx ends, never leave it stopped
	return p.Signal(syscall.SIGCONT)
}

// countDuplicates adds the duplicates a consumer counted so far to the
// rig's total before the process (and its counters) goes away.
func (r *Rig) countDuplicates(ctx context.Context, p *system.Process) {
	if !r.consumer(p) {
		return
	}
	if v, err := p.Metric(ctx, "inbox_duplicates_total", nil); err == nil {
		r.mu.Lock()
		r.dupsBefore += v
		r.mu.Unlock()
	}
}

// consumer reports whether p is the serve process of a consumer of the
// registry, or a replica of one.
func (r *Rig) consumer(p *system.Process) bool {
	for _, c := range contracts.Consumers() {
		if orig := r.Sys.Process(c.Name); orig != nil && p.Bin == orig.Bin && slices.Equal(p.Args, orig.Args) {
			return true
		}
	}
	return false
}

// Duplicates returns the deliveries every consumer's inbox recognised as duplicates
// since the rig started (counters of replaced processes included as far as
// they could be read before the process went away).
func (r *Rig) Duplicates(ctx context.Context) int {
	r.mu.Lock()
	n := r.dupsBefore
	r.mu.Unlock()
	for _, p := range r.Sys.All() {
		if !r.consumer(p) {
			continue
		}
		if v, err := p.Metric(ctx, "inbox_duplicates_total", nil); err == nil {
			n += v
		}
	}
	return int(n)
}

// database returns the database name and the server's admin URL of db, a
// service of the registry.
func (r *Rig) database(db string) (name, admin string, err error) {
	raw := r.cfg.DBURLs[db]
	u, err := url.Parse(raw)
	if raw == "" || err != nil {
		return "", "", fmt.Errorf("no database %q", db)
	}
	name = strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	return name, u.String(), nil
}

func (r *Rig) admin(ctx context.Context, db string, fn func(conn *pgx.Conn, name string) error) error {
	name, admin, err := r.database(db)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("%s database: %w", db, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(conn, name)
}

// BlockDatabase makes database db ("order", "stock", "shipping") refuse new
// connections (ALTER DATABASE ... ALLOW_CONNECTIONS false) and terminates
// every session on it, its own processes' and the ledger's alike. The
// returned function lets connections in again.
func (r *Rig) BlockDatabase(ctx context.Context, db string) (unblock func(context.Context) error, err error) {
	err = r.admin(ctx, db, func(conn *pgx.Conn, name string) error {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" ALLOW_CONNECTIONS false"); err != nil {
			return fmt.Errorf("block %s: %w", name, err)
		}
		_, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		return r.admin(ctx, db, func(conn *pgx.Conn, name string) error {
			_, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" ALLOW_CONNECTIONS true")
			return err
		})
	}, nil
}

// TerminateBackends ends every session on database db (pg_terminate_backend)
// and returns how many there were.
func (r *Rig) TerminateBackends(ctx context.Context, db string) (int, error) {
	var n int
	err := r.admin(ctx, db, func(conn *pgx.Conn, name string) error {
		return conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name).Scan(&n)
	})
	return n, err
}

// Vhost returns the name of the rig's vhost.
func (r *Rig) Vhost() string { return r.cfg.Vhost }

// AMQPURL returns the direct URL of the rig's vhost (not proxied).
func (r *Rig) AMQPURL() string { return r.cfg.AMQPURL }

// Broker runs fn on a channel of a fresh direct connection to the rig's
// vhost (for example to delete a queue or an exchange).
func (r *Rig) Broker(ctx context.Context, fn func(ch *amqp091.Channel) error) error {
	conn, err := system.Dial(r.cfg.AMQPURL)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: channel: %w", err)
	}
	return fn(ch)
}

// Ctl runs rabbitmqctl on the rig's broker; "-p <vhost>" is added after the
// command when vhostScoped.
func (r *Rig) Ctl(ctx context.Context, vhostScoped bool, args ...string) (string, error) {
	if r.cfg.Ctl == nil {
		return "", errors.New("rabbitmqctl: the rig has no broker control")
	}
	if vhostScoped && len(args) > 0 {
		args = append([]string{args[0], "-p", r.cfg.Vhost}, args[1:]...)
	}
	return r.cfg.Ctl(ctx, args...)
}

// syncWriter serialises the writes of several processes to one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
