package system

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Config says where the binaries are and which servers the system uses.
type Config struct {
	BinDir        string              // holds order, stock and shipping
	OrderDBURL    string              // ORDER_DATABASE_URL
	StockDBURL    string              // STOCK_DATABASE_URL
	ShippingDBURL string              // SHIPPING_DATABASE_URL
	AMQPURL       string              // AMQP_URL (may name a vhost)
	Env           []string            // KEY=VALUE added to every process
	ProcessEnv    map[string][]string // KEY=VALUE added to one process, by name (its own role and broker user)
	Addrs         map[string]string   // HTTP address of a process, by name; a free 127.0.0.1 port when absent
	Standby       bool                // run a second `order relay` ("standby") that contends for the relay's lock
	Log           io.Writer           // receives every process's output, prefixed; nil to keep it in memory only
	// Auditor adds `auditor serve` to the processes All starts, reading the three
	// databases (AUDITOR_*_DATABASE_URL: AuditorDBURLs when set, else the services'
	// URLs) and scraping stock's and shipping's /metrics.
	Auditor       bool
	AuditorDBURLs *DBURLs
}

// DBURLs are the order, stock and shipping database URLs of one role.
type DBURLs struct{ Order, Stock, Shipping string }

// System is the long-running processes of the shop: four, a standby relay
// when Config.Standby is set, and the auditor when Config.Auditor is set.
type System struct {
	cfg      Config
	OrderAPI *Process
	Relay    *Process
	Standby  *Process // nil unless Config.Standby
	Stock    *Process
	Shipping *Process
	Auditor  *Process // nil unless Config.Auditor
}

// New prepares the processes on free local ports; nothing starts yet.
func New(cfg Config) (*System, error) {
	s := &System{cfg: cfg}
	var err error
	if s.OrderAPI, err = s.process("order", "order", "serve"); err != nil {
		return nil, err
	}
	if s.Relay, err = s.process("relay", "order", "relay"); err != nil {
		return nil, err
	}
	if cfg.Standby {
		if s.Standby, err = s.process("standby", "order", "relay"); err != nil {
			return nil, err
		}
	}
	if s.Stock, err = s.process("stock", "stock", "serve"); err != nil {
		return nil, err
	}
	if s.Shipping, err = s.process("shipping", "shipping", "serve"); err != nil {
		return nil, err
	}
	if cfg.Auditor {
		if s.Auditor, err = s.process("auditor", "auditor", "serve"); err != nil {
			return nil, err
		}
		urls := DBURLs{cfg.OrderDBURL, cfg.StockDBURL, cfg.ShippingDBURL}
		if cfg.AuditorDBURLs != nil {
			urls = *cfg.AuditorDBURLs
		}
		// Before the caller's ProcessEnv, which it may override.
		s.Auditor.Env = append([]string{
			"AUDITOR_ORDER_DATABASE_URL=" + urls.Order,
			"AUDITOR_STOCK_DATABASE_URL=" + urls.Stock,
			"AUDITOR_SHIPPING_DATABASE_URL=" + urls.Shipping,
			"AUDITOR_STOCK_METRICS_URL=http://" + s.Stock.Addr + "/metrics",
			"AUDITOR_SHIPPING_METRICS_URL=http://" + s.Shipping.Addr + "/metrics",
		}, s.Auditor.Env...)
	}
	return s, nil
}

func (s *System) process(name, bin string, args ...string) (*Process, error) {
	addr := s.cfg.Addrs[name]
	if addr == "" {
		var err error
		if addr, err = FreeAddr(); err != nil {
			return nil, fmt.Errorf("%s: free port: %w", name, err)
		}
	}
	env := append([]string{
		"ORDER_DATABASE_URL=" + s.cfg.OrderDBURL,
		"STOCK_DATABASE_URL=" + s.cfg.StockDBURL,
		"SHIPPING_DATABASE_URL=" + s.cfg.ShippingDBURL,
		"AMQP_URL=" + s.cfg.AMQPURL,
		"HTTP_ADDR=" + addr,
	}, s.cfg.Env...)
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

// All returns the processes in start order.
func (s *System) All() []*Process {
	all := []*Process{s.OrderAPI, s.Relay}
	if s.Standby != nil {
		all = append(all, s.Standby)
	}
	all = append(all, s.Stock, s.Shipping)
	if s.Auditor != nil {
		all = append(all, s.Auditor)
	}
	return all
}

// Migrate runs `<bin> migrate` for the three databases, one after another,
// and returns the first failure with the command's output. It connects with
// Config's URLs (the databases' owner), never with a process's own
// ProcessEnv (which may name a role that cannot create tables).
func (s *System) Migrate(ctx context.Context) error {
	env := append(os.Environ(),
		"ORDER_DATABASE_URL="+s.cfg.OrderDBURL,
		"STOCK_DATABASE_URL="+s.cfg.StockDBURL,
		"SHIPPING_DATABASE_URL="+s.cfg.ShippingDBURL)
	for _, p := range []*Process{s.OrderAPI, s.Stock, s.Shipping} {
		cmd := exec.CommandContext(ctx, p.Bin, "migrate")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s migrate: %w: %s", p.Name, err, out)
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
