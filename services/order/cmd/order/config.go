package main

import (
	"log/slog"

	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/pg"
)

// Defaults of the order service (docs/operations.md lists every variable).
const (
	defaultDatabaseURL   = "postgres://postgres@localhost:5432/orders?sslmode=disable"
	defaultHTTPAddr      = ":8081"
	defaultRelayHTTPAddr = ":8084"
)

// serveConfig is the configuration of `order serve`, read from the environment:
//
//	ORDER_DATABASE_URL  PostgreSQL URL (default postgres://postgres@localhost:5432/orders?sslmode=disable);
//	                    pool size through its pool_max_conns parameter
//	HTTP_ADDR           HTTP listen address (default :8081; "127.0.0.1:0" picks a free port)
//	LOG_LEVEL           debug, info, warn or error (default info)
//	MIGRATE_ON_START    apply the migrations before serving (default false)
type serveConfig struct {
	DatabaseURL    string
	HTTPAddr       string
	LogLevel       slog.Level
	MigrateOnStart bool
}

// loadServeConfig reads serveConfig through env; env.Err names every bad variable.
func loadServeConfig(env *config.Env) serveConfig {
	return serveConfig{
		DatabaseURL:    pg.URLFromEnv(env, "ORDER_DATABASE_URL", defaultDatabaseURL),
		HTTPAddr:       env.String("HTTP_ADDR", defaultHTTPAddr),
		LogLevel:       logging.LevelFromEnv(env),
		MigrateOnStart: env.Bool("MIGRATE_ON_START", false),
	}
}

// LogValue logs the configuration with the database password masked.
func (c serveConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Bool("migrate_on_start", c.MigrateOnStart),
	)
}

// migrateConfig is the configuration of `order migrate`: ORDER_DATABASE_URL and
// LOG_LEVEL, as for serve.
type migrateConfig struct {
	DatabaseURL string
	LogLevel    slog.Level
}

// loadMigrateConfig reads migrateConfig through env; env.Err names every bad variable.
func loadMigrateConfig(env *config.Env) migrateConfig {
	return migrateConfig{
		DatabaseURL: pg.URLFromEnv(env, "ORDER_DATABASE_URL", defaultDatabaseURL),
		LogLevel:    logging.LevelFromEnv(env),
	}
}

// LogValue logs the configuration with the database password masked.
func (c migrateConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("log_level", c.LogLevel.String()),
	)
}
