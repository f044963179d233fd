package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/telemetry"
	apidoc "example.com/shop/services/auditor/api"
	"example.com/shop/services/auditor/internal/api"
	"example.com/shop/services/auditor/internal/auditor"
	"example.com/shop/services/auditor/internal/probe"
	"example.com/shop/services/auditor/internal/store"
)

// service names the auditor in logs.
const service = "auditor"

// run is the whole program: args are os.Args, getenv reads the environment, command
// output goes to stdout and JSON logs to stderr. For serve it returns once ctx ends
// and the server has shut down; a *cli.UsageError for a command line that cannot run.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return cli.Program{
		Name:    service,
		Summary: "audits that every published event reached its consumers; the journey API and live page",
		Commands: []cli.Command{{
			Name: "serve",
			Summary: "serve the live page at /, the journey API, /audit, /healthz, /readyz and /metrics " +
				"on HTTP_ADDR, and audit continuously",
			Env: func(env *config.Env) { loadServeConfig(env) },
			Run: func(ctx context.Context, _ []string) error { return runServe(ctx, getenv, stderr) },
		}},
	}.Run(ctx, args, stdout)
}

// runServe serves the auditor until ctx ends, through httpx.Starting.Run: config
// and logger; the listener, which answers /healthz, /metrics and a 503 /readyz and
// 503 problems until the database of every service of the registry
// (contracts.Services) answers (pg.WaitPool each); then the continuous audit of every
// producer's outbox against every consumer, and the full router. ctx's end stops the audit and starts a
// graceful HTTP shutdown bounded by httpx.ShutdownTimeout (10 s).
func runServe(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, loadServeConfig)
	if err != nil {
		return err
	}
	logger, stopTracing, err := telemetry.StartProcess(ctx, stderr, cfg.LogLevel, service, "starting", cfg)
	if err != nil {
		return err
	}
	defer stopTracing()
	reg := metrics.NewRegistry()

	var pools []*pgxpool.Pool
	defer func() {
		for _, p := range pools {
			pg.Close(p)
		}
	}()
	// The broker is only read for dead-letter queue depths, on demand: the probe
	// dials it then, so the auditor starts and audits without it.
	pr := probe.New(cfg.MetricsURLs, cfg.AMQPURL, logger)
	defer func() { _ = pr.Close() }()
	var st atomic.Pointer[store.Store]
	check := httpx.Pending("postgres", &st, (*store.Store).Ping)
	srv, err := httpx.Listen(ctx, cfg.HTTPAddr, logger, reg, "starting: not connected to the databases yet", check)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
		s, err := openStore(ctx, cfg, logger, &pools)
		if err != nil {
			return nil, err
		}
		audit, err := auditor.New(s, auditor.Config{Interval: cfg.Interval, Grace: cfg.Grace, Window: cfg.Window,
			QueueDepths: pr.QueueDepths}, reg, logger)
		if err != nil {
			return nil, err
		}
		st.Store(s)
		router := httpx.NewRouter(logger, reg, check)
		api.New(audit, auditor.NewJourneys(s, cfg.Grace), s, pr, api.RegistryTopology(), apidoc.OpenAPI, logger).Routes(router)
		srv.Ready(router)
		logger.InfoContext(ctx, "auditor ready", slog.String("page", "http://"+displayAddr(srv.Addr())+"/"),
			slog.Int("databases", len(contracts.Services())))
		return audit.Run, nil
	})
	logger.InfoContext(ctx, "stopped", slog.Any("error", err))
	return err
}

// openStore waits for the database of every service of the registry (pg.WaitPool, which
// names the service's migrate command when one is missing) and returns the store
// on them; every pool it opened is appended to pools, for the caller to close.
func openStore(ctx context.Context, cfg serveConfig, logger *slog.Logger, pools *[]*pgxpool.Pool) (*store.Store, error) {
	// The auditor reads what each service's migrate command creates: one pool per
	// service of the registry; a service that both publishes and consumes shares its
	// pool between the two.
	services := map[string]*pgxpool.Pool{}
	for _, svc := range contracts.Services() {
		p, err := pg.WaitPool(ctx, cfg.Databases[svc.Name], logger, pg.CreatedBy(svc.Name+" migrate"))
		if err != nil {
			return nil, err
		}
		*pools = append(*pools, p)
		services[svc.Name] = p
	}
	producers, consumers := map[string]*pgxpool.Pool{}, map[string]*pgxpool.Pool{}
	for _, p := range contracts.Producers() {
		producers[p.Name] = services[p.Name]
	}
	for _, c := range contracts.Consumers() {
		consumers[c.Name] = services[c.Name]
	}
	return store.New(producers, consumers), nil
}

// displayAddr turns a listen address such as [::]:8085 into one a browser opens.
func displayAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "localhost:" + port
	}
	return addr
}
