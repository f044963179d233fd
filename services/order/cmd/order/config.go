package main

import (
	"log/slog"

	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
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

// loadServeConfig reads serveConfig through getenv. The error names every bad variable.
func loadServeConfig(getenv func(string) string) (serveConfig, error) {
	env := config.NewEnv(getenv)
	c := serveConfig{
		DatabaseURL:    env.String("ORDER_DATABASE_URL", config.DefaultOrderDatabaseURL),
		HTTPAddr:       env.String("HTTP_ADDR", config.DefaultOrderHTTPAddr),
		LogLevel:       logging.LevelFromEnv(env),
		MigrateOnStart: env.Bool("MIGRATE_ON_START", false),
	}
	return c, env.Err()
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

// loadMigrateConfig reads migrateConfig through getenv. The error names every bad variable.
func loadMigrateConfig(getenv func(string) string) (migrateConfig, error) {
	env := config.NewEnv(getenv)
	c := migrateConfig{
		DatabaseURL: env.String("ORDER_DATABASE_URL", config.DefaultOrderDatabaseURL),
		LogLevel:    logging.LevelFromEnv(env),
	}
	return c, env.Err()
}

// LogValue logs the configuration with the database password masked.
func (c migrateConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("log_level", c.LogLevel.String()),
	)
}
