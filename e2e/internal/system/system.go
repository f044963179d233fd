package system

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/testkit"
)

// Config says where the binaries are and which servers the system uses.
type Config struct {
	BinDir string // holds a binary per service of the registry, and auditor
	// DBURLs holds the database URL of every service of the registry
	// (contracts.Services), by service name; each process gets every one as
	// <NAME>_DATABASE_URL. New fails when one is missing.
	DBURLs     map[string]string
	AMQPURL    string              // AMQP_URL (may name a vhost)
	Env        []string            // KEY=VALUE added to every process
	ProcessEnv map[string][]string // KEY=VALUE added to one process, by name (its own role and broker user)
	Addrs      map[string]string   // HTTP address of a process, by name; a free 127.0.0.1 port when absent
	Standby    bool                // run a second `order relay` ("standby") that contends for the relay's lock
	Log        io.Writer           // receives every process's output, prefixed; nil to keep it in memory only
	// Auditor adds `auditor serve` to the processes All starts, reading every
	// service's database (AUDITOR_<NAME>_DATABASE_URL: AuditorDBURLs when set,
	// else DBURLs) and scraping every consumer's /metrics.
	Auditor       bool
	AuditorDBURLs map[string]string
	// Replicas adds, for a process of the system by name (a service, a
	// "<producer>-relay"), that many more copies of it, named "<name>-2",
	// "<name>-3", ...: the same binary, subcommand and environment (its
	// ProcessEnv included), each on its own HTTP port.
	Replicas map[string]int
}

// System is the long-running processes of the shop, one set per service of the
// registry (contracts.Services): `<service> serve` for each service, named after
// it, and `<producer> relay` for each producer (contracts.Producers), named
// "<producer>-relay". Standby adds a second order relay, and Auditor the auditor.
// The fields name the processes the suite drives by hand.
type System struct {
	cfg      Config
	services []*Process // every `serve` and relay, in start order
	OrderAPI *Process
	Relay    *Process // order's relay
	Standby  *Process // nil unless Config.Standby
	Stock    *Process
	Shipping *Process
	Auditor  *Process   // nil unless Config.Auditor
	replicas []*Process // Config.Replicas, in start order
}

// RelayName is the name of producer's relay process, e.g. "order-relay" (also its
// RabbitMQ user in deploy/rabbitmq/definitions.json).
func RelayName(producer string) string { return producer + "-relay" }

// New prepares the processes on free local ports; nothing starts yet.
func New(cfg Config) (*System, error) {
	s := &System{cfg: cfg}
	for _, svc := range contracts.Services() {
		if cfg.DBURLs[svc.Name] == "" {
			return nil, fmt.Errorf("system: no database URL for service %s of the registry", svc.Name)
		}
		p, err := s.process(svc.Name, svc.Name, "serve")
		if err != nil {
			return nil, err
		}
		s.services = append(s.services, p)
	}
	for _, prod := range contracts.Producers() {
		p, err := s.process(RelayName(prod.Name), prod.Name, "relay")
		if err != nil {
			return nil, err
		}
		s.services = append(s.services, p)
	}
	s.OrderAPI = s.Process(contracts.ProducerOrder)
	s.Relay = s.Process(RelayName(contracts.ProducerOrder))
	s.Stock = s.Process(contracts.ConsumerStock)
	s.Shipping = s.Process(contracts.ConsumerShipping)
	var err error
	if cfg.Standby {
		if s.Standby, err = s.process("standby", contracts.ProducerOrder, "relay"); err != nil {
			return nil, err
		}
	}
	for _, base := range slices.Sorted(maps.Keys(cfg.Replicas)) {
		orig := s.Process(base)
		if orig == nil {
			return nil, fmt.Errorf("system: replicas of %q: no such process", base)
		}
		for i := range cfg.Replicas[base] {
			name := fmt.Sprintf("%s-%d", base, i+2)
			p, err := s.process(name, filepath.Base(orig.Bin), orig.Args...)
			if err != nil {
				return nil, err
			}
			p.Env = append(p.Env, cfg.ProcessEnv[base]...)
			s.replicas = append(s.replicas, p)
		}
	}
	if cfg.Auditor {
		if s.Auditor, err = s.process("auditor", "auditor", "serve"); err != nil {
			return nil, err
		}
		urls := cfg.DBURLs
		if cfg.AuditorDBURLs != nil {
			urls = cfg.AuditorDBURLs
		}
		// Before the caller's ProcessEnv, which it may override.
		var env []string
		for _, svc := range contracts.Services() {
			env = append(env, auditorVar(svc.Name, "DATABASE_URL")+"="+urls[svc.Name])
		}
		for _, c := range contracts.Consumers() {
			env = append(env, auditorVar(c.Name, "METRICS_URL")+"=http://"+s.Process(c.Name).Addr+"/metrics")
		}
		s.Auditor.Env = append(env, s.Auditor.Env...)
	}
	return s, nil
}

// Process returns the process called name (a service, "<producer>-relay",
// "standby" or "auditor"), or nil when the system has none.
func (s *System) Process(name string) *Process {
	for _, p := range s.All() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// variable is a service's variable name: the service in upper case, then setting
// (STOCK_DATABASE_URL).
func variable(service, setting string) string {
	return strings.ToUpper(strings.ReplaceAll(service, "-", "_")) + "_" + setting
}

// auditorVar is the auditor's variable for a service's setting
// (AUDITOR_STOCK_DATABASE_URL).
func auditorVar(service, setting string) string { return "AUDITOR_" + variable(service, setting) }

// dbEnv is every service's <NAME>_DATABASE_URL, with the Config's URLs.
func (s *System) dbEnv() []string {
	var env []string
	for _, svc := range contracts.Services() {
		env = append(env, variable(svc.Name, "DATABASE_URL")+"="+s.cfg.DBURLs[svc.Name])
	}
	return env
}

func (s *System) process(name, bin string, args ...string) (*Process, error) {
	addr := s.cfg.Addrs[name]
	if addr == "" {
		var err error
		if addr, err = testkit.FreeAddr(); err != nil {
			return nil, fmt.Errorf("%s: free port: %w", name, err)
		}
	}
	env := append(s.dbEnv(), "AMQP_URL="+s.cfg.AMQPURL, "HTTP_ADDR="+addr)
	env = append(env, s.cfg.Env...)
	env = append(env, s.cfg.ProcessEnv[name]...)
	return &Process{
		Name: name,
		Bin:  filepath.Join(s.cfg.BinDir, bin),
		Args: args,
		Env:  env,
		Addr: addr,
		Log:  s.cfg.Log,
	}, nil
}

// All returns the processes in start order: each service's serve, each
// producer's relay, the standby, the replicas, the auditor.
func (s *System) All() []*Process {
	all := slices.Clone(s.services)
	if s.Standby != nil {
		all = append(all, s.Standby)
	}
	all = append(all, s.replicas...)
	if s.Auditor != nil {
		all = append(all, s.Auditor)
	}
	return all
}

// Migrate runs `<service> migrate` for every service of the registry, one
// after another, and returns the first failure with the command's output. It
// connects with Config's URLs (the databases' owner), never with a process's
// own ProcessEnv (which may name a role that cannot create tables).
func (s *System) Migrate(ctx context.Context) error {
	env := append(os.Environ(), s.dbEnv()...)
	for _, svc := range contracts.Services() {
		cmd := exec.CommandContext(ctx, filepath.Join(s.cfg.BinDir, svc.Name), "migrate")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s migrate: %w: %s", svc.Name, err, out)
		}
	}
	return nil
}

// Run runs `<bin> args...` once (a one-shot subcommand such as
// purge-outbox) with the environment of process p, and returns its output.
func (s *System) Run(ctx context.Context, p *Process, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, p.Bin, args...)
	cmd.Env = p.cmdEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Start starts every process and waits until each answers /readyz, within
// timeout. On failure it stops what it started.
func (s *System) Start(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, p := range s.All() {
		if err := p.Start(); err != nil {
			s.Stop()
			return err
		}
	}
	for _, p := range s.All() {
		if err := p.WaitReady(ctx); err != nil {
			s.Stop()
			return err
		}
	}
	return nil
}

// Stop stops every process gracefully (SIGTERM, 10 s grace each).
func (s *System) Stop() error {
	var errs []error
	for _, p := range s.All() {
		errs = append(errs, p.Stop(10*time.Second))
	}
	return errors.Join(errs...)
}

// Restart starts p again after a Stop or Kill and waits until it is ready.
func (s *System) Restart(ctx context.Context, p *Process, timeout time.Duration) error {
	if err := p.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p.WaitReady(ctx)
}
