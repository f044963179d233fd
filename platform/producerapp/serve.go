package producerapp

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/serveapp"
)

// ServeConfig is the configuration of `<name> serve`, read from the environment
// by Service.LoadServeConfig:
//
//	<P>DATABASE_URL   PostgreSQL URL of the service's database (default Service.DatabaseURL)
//	HTTP_ADDR         HTTP listen address (default Service.HTTPAddr)
//	LOG_LEVEL         debug, info, warn or error (default info)
//	MIGRATE_ON_START  apply Service.Schema before serving (default false)
//
// then, when serve mounts a consumer, the consumer's variables
// (consumerapp.ConsumeConfig).
type ServeConfig struct {
	DatabaseURL    string
	HTTPAddr       string
	LogLevel       slog.Level
	MigrateOnStart bool
	// Consumer is the mounted consumer's configuration, nil without one.
	Consumer *consumerapp.ConsumeConfig
}

// LoadServeConfig reads ServeConfig through env, without a consumer's part;
// env.Err names every bad variable.
func (s Service) LoadServeConfig(env *config.Env) ServeConfig {
	return ServeConfig{
		DatabaseURL:    pg.URLFromEnv(env, s.EnvPrefix+"DATABASE_URL", s.DatabaseURL),
		HTTPAddr:       env.String("HTTP_ADDR", s.HTTPAddr),
		LogLevel:       logging.LevelFromEnv(env),
		MigrateOnStart: env.Bool("MIGRATE_ON_START", false),
	}
}

// LogValue logs the configuration with the passwords masked.
func (c ServeConfig) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Bool("migrate_on_start", c.MigrateOnStart),
	}
	if c.Consumer != nil {
		attrs = append(attrs, slog.Any("consumer", *c.Consumer))
	}
	return slog.GroupValue(attrs...)
}

// ServeCommand is `<name> serve`: the service's HTTP API over its database, whose
// handlers write their changes and the events about them in one transaction
// (docs/architecture.md, rule 1), for `<name> relay` to publish. The API needs
// no broker: /readyz checks "postgres" alone. consumer, at most one, is the
// service's consumer role (consumerapp.Service.Consumer), mounted behind the API
// (consumerapp.Consumer.Behind): the routes serve once it is subscribed or 5 s
// after the database answers, and it waits for a broker that is away behind
// them. It reads ServeConfig through getenv, the consumer's part included, and
// logs JSON to stderr; serveapp.Run states the life cycle.
func (s Service) ServeCommand(getenv func(string) string, stderr io.Writer, routes httpx.Routes, consumer ...consumerapp.Consumer) cli.Command {
	summary := "serve the HTTP API (HTTP_ADDR), writing events to the outbox"
	if len(consumer) > 0 {
		summary += ", and consume " + consumer[0].Queue()
	}
	return cli.Command{
		Name:    "serve",
		Summary: summary,
		Env:     func(env *config.Env) { s.loadServeConfig(env, consumer) },
		Run: func(ctx context.Context, _ []string) error {
			return s.serve(ctx, getenv, stderr, routes, consumer)
		},
	}
}

// MigrateCommand is `<name> migrate` (migrate.Command) with Service.Schema.
func (s Service) MigrateCommand(getenv func(string) string, stderr io.Writer) cli.Command {
	return migrate.Command(s.Name, s.EnvPrefix, s.DatabaseURL, s.Schema, getenv, stderr)
}

// loadServeConfig reads ServeConfig, with the part of consumer's first consumer.
func (s Service) loadServeConfig(env *config.Env, consumer []consumerapp.Consumer) ServeConfig {
	c := s.LoadServeConfig(env)
	if len(consumer) > 0 {
		cc := consumer[0].LoadConfig(env)
		c.Consumer = &cc
	}
	return c
}

// serve runs the API, with the outbox table waited for, and the consumer behind
// it when there is one (serveapp.Run).
func (s Service) serve(ctx context.Context, getenv func(string) string, stderr io.Writer, routes httpx.Routes, consumer []consumerapp.Consumer) error {
	if len(consumer) > 1 {
		return errors.New("serve mounts at most one consumer")
	}
	cfg, err := config.Load(getenv, func(env *config.Env) ServeConfig { return s.loadServeConfig(env, consumer) })
	if err != nil {
		return err
	}
	api := serveapp.API{
		Name: s.Name, Config: cfg, LogLevel: cfg.LogLevel, DatabaseURL: cfg.DatabaseURL, HTTPAddr: cfg.HTTPAddr,
		MigrateOnStart: cfg.MigrateOnStart, Schema: s.Schema, Tables: []string{"outbox"}, Routes: routes,
	}
	var role serveapp.Role
	if len(consumer) > 0 {
		if role, err = consumer[0].Behind(*cfg.Consumer, &api); err != nil {
			return err
		}
	}
	return serveapp.Run(ctx, stderr, api, role)
}
