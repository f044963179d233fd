// Package serveapp runs a service's `serve`: its HTTP API over its database, and the
// role it mounts beside the API, a consumer (package consumerapp). It is the one
// life cycle of consumerapp's serve and producerapp's; neither names a service.
package serveapp

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/telemetry"
)

// API is the HTTP API every serve runs, over the service's database.
type API struct {
	// Name is the binary: the log lines' service attribute, and `<Name> migrate`
	// in the hints of the database waits.
	Name string
	// Config is logged, with the "starting" line, as the process's configuration.
	Config   any
	LogLevel slog.Level
	// DatabaseURL is the service's database, HTTPAddr the listen address.
	DatabaseURL, HTTPAddr string
	// MigrateOnStart applies Schema before the database is waited for.
	MigrateOnStart bool
	Schema         migrate.Schema
	// Tables are the tables `<Name> migrate` creates that serve waits for.
	Tables []string
	Routes httpx.Routes
}

// Role is what a serve runs beside its API. Its methods are called from Run, in
// the order listed; Checks' functions may run on any goroutine.
type Role interface {
	// Checks are the role's /readyz checks, after "postgres".
	Checks() []httpx.Check
	// Start sets the role up over pool, once the database answers, and returns its
	// loop, which Run runs until ctx ends. ready mounts the routes: the role calls
	// it once the API may answer, from Start or from the loop; a loop that
	// returns nil when ctx ends is a clean shutdown.
	Start(ctx context.Context, pool *pgxpool.Pool, ready func(), logger *slog.Logger, reg prometheus.Registerer) (loop func(context.Context) error, err error)
	// Close closes what Start opened, after the loop has returned.
	Close()
}

// Run runs serve until ctx ends or a part fails, then stops every part. It reads
// top to bottom: logger and tracing, api.Config logged; the HTTP server,
// listening first and answering /healthz, /metrics and /readyz (503 until the
// routes serve) and a 503 problem on every other path; with api.MigrateOnStart,
// api.Schema applied, retried while the server does not answer (pg.Retry); the
// database, waited for with pg.WaitPool until api.Tables exist; then, without a
// role, the routes, served until ctx ends, and with one, role.Start, which
// mounts them, and its loop. The shutdown is bounded by the loop's and
// httpx.ShutdownTimeout. /readyz checks "postgres" (ping), then role.Checks.
//
// role may be nil. Run returns nil after a clean shutdown, also when ctx ends
// while it still waits for a dependency.
func Run(ctx context.Context, stderr io.Writer, api API, role Role) error {
	logger, stopTracing, err := telemetry.StartProcess(ctx, stderr, api.LogLevel, api.Name, "starting", api.Config)
	if err != nil {
		return err
	}
	defer stopTracing()
	var db atomic.Pointer[pgxpool.Pool]
	defer func() { pg.Close(db.Load()) }()
	checks := []httpx.Check{httpx.Pending("postgres", &db, (*pgxpool.Pool).Ping)}
	if role != nil {
		defer role.Close()
		checks = append(checks, role.Checks()...)
	}

	reg := metrics.NewRegistry()
	srv, err := httpx.Listen(ctx, api.HTTPAddr, logger, reg, "starting: not connected to its dependencies yet", checks...)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, func(ctx context.Context) (func(context.Context) error, error) {
		if api.MigrateOnStart {
			if err := migrate.OnStart(ctx, api.DatabaseURL, api.Schema, logger); err != nil {
				return nil, err
			}
		}
		pool, err := pg.WaitPool(ctx, api.DatabaseURL, logger, pg.CreatedBy(api.Name+" migrate"), pg.RequireTables(api.Tables...))
		if err != nil {
			return nil, err
		}
		db.Store(pool)
		ready := func() { srv.Ready(api.Routes(pool, logger, reg, checks)) }
		if role == nil {
			ready()
			logger.InfoContext(ctx, "connected", slog.String("database", config.MaskURL(api.DatabaseURL)))
			return nil, nil
		}
		return role.Start(ctx, pool, ready, logger, reg)
	})
	logger.InfoContext(ctx, "stopped", slog.Any("error", err))
	return err
}
