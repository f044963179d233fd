package main

import (
	"log/slog"
	"time"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/pg"
)

// Defaults of the stock service (docs/operations.md lists every variable).
const (
	defaultDatabaseURL = "postgres://postgres@localhost:5432/stock?sslmode=disable"
	defaultHTTPAddr    = ":8082"
)

// serveConfig is the configuration of `stock serve`, read from the environment:
//
//	STOCK_DATABASE_URL      PostgreSQL URL (default the local stock database); without
//	                        pool_max_conns, the pool gets one connection per inbox
//	                        transaction that can run at once, plus 4
//	AMQP_URL                RabbitMQ URL (default amqp://guest:guest@localhost:5672/)
//	HTTP_ADDR               HTTP listen address (default :8082)
//	LOG_LEVEL               debug, info, warn or error (default info)
//	STOCK_WORKERS           deliveries handled at once (default 256)
//	STOCK_PREFETCH          deliveries the broker sends ahead (default 4 * STOCK_WORKERS)
//	STOCK_INBOX_GROUP       most events committed in one transaction (inbox.WithGroupCommit;
//	                        default 128, 1 = off): one WAL flush commits many reservations
//	STOCK_INBOX_TX          inbox transactions at once when grouping (default 2)
//	STOCK_MAX_ATTEMPTS      deliveries of a failing event before it is dead-lettered (default 5)
//	STOCK_RETRY_DELAYS      comma-separated delay per retry level, whole milliseconds >= 1ms
//	                        (default 1s,5s,30s)
//	INBOX_MIN_RETENTION     shortest horizon purge-inbox and dlq replay accept (default 168h;
//	                        docs/architecture.md rule 5)
//	AMQP_REDECLARE_INTERVAL how often serve declares its queue, bindings, retry and
//	                        dead-letter queues again, repairing what was deleted (default 5s)
//
// Counts are positive whole numbers, durations positive Go durations ("90s").
type serveConfig struct {
	DatabaseURL       string
	AMQPURL           string
	HTTPAddr          string
	LogLevel          slog.Level
	Workers           int
	Prefetch          int
	InboxGroup        int
	InboxTx           int
	MaxAttempts       int
	RetryDelays       []time.Duration
	MinRetention      time.Duration
	RedeclareInterval time.Duration
}

// loadServeConfig reads serveConfig through env; env.Err names every bad variable.
func loadServeConfig(env *config.Env) serveConfig {
	c := serveConfig{
		DatabaseURL:       pg.URLFromEnv(env, "STOCK_DATABASE_URL", defaultDatabaseURL),
		AMQPURL:           amqp.URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL),
		HTTPAddr:          env.String("HTTP_ADDR", defaultHTTPAddr),
		LogLevel:          logging.LevelFromEnv(env),
		Workers:           env.PositiveInt("STOCK_WORKERS", 256),
		InboxGroup:        env.PositiveInt("STOCK_INBOX_GROUP", 128),
		InboxTx:           env.PositiveInt("STOCK_INBOX_TX", 2),
		MaxAttempts:       env.PositiveInt("STOCK_MAX_ATTEMPTS", 5),
		RetryDelays:       retryDelays(env, "STOCK_RETRY_DELAYS"),
		MinRetention:      env.PositiveDuration("INBOX_MIN_RETENTION", 168*time.Hour),
		RedeclareInterval: env.PositiveDuration("AMQP_REDECLARE_INTERVAL", 5*time.Second),
	}
	c.Prefetch = env.PositiveInt("STOCK_PREFETCH", 4*c.Workers)
	return c
}

// poolSize is the number of database connections serve needs: one per inbox
// transaction that can run at once, and 4 for HTTP and readiness checks.
func (c serveConfig) poolSize() int {
	if c.InboxGroup > 1 {
		return min(c.InboxTx, c.Workers) + 4
	}
	return c.Workers + 4
}

// LogValue logs the configuration with the passwords masked.
func (c serveConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("amqp_url", config.MaskURL(c.AMQPURL)),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Int("workers", c.Workers), slog.Int("prefetch", c.Prefetch),
		slog.Int("inbox_group", c.InboxGroup), slog.Int("inbox_tx", c.InboxTx),
		slog.Int("max_attempts", c.MaxAttempts), slog.Any("retry_delays", c.RetryDelays),
		slog.Duration("min_retention", c.MinRetention),
		slog.Duration("redeclare_interval", c.RedeclareInterval),
	)
}

// toolConfig is the configuration of the one-shot commands migrate, purge-inbox and
// dlq: STOCK_DATABASE_URL, AMQP_URL (dlq only reads it), LOG_LEVEL and
// INBOX_MIN_RETENTION, as for serve.
type toolConfig struct {
	DatabaseURL  string
	AMQPURL      string
	LogLevel     slog.Level
	MinRetention time.Duration
}

// loadMigrateConfig reads what migrate needs through env.
func loadMigrateConfig(env *config.Env) toolConfig {
	return toolConfig{DatabaseURL: pg.URLFromEnv(env, "STOCK_DATABASE_URL", defaultDatabaseURL), LogLevel: logging.LevelFromEnv(env)}
}

// loadPurgeConfig reads what purge-inbox needs through env.
func loadPurgeConfig(env *config.Env) toolConfig {
	c := loadMigrateConfig(env)
	c.MinRetention = env.PositiveDuration("INBOX_MIN_RETENTION", 168*time.Hour)
	return c
}

// loadDLQConfig reads what dlq needs through env.
func loadDLQConfig(env *config.Env) toolConfig {
	c := loadPurgeConfig(env)
	c.AMQPURL = amqp.URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL)
	return c
}

// retryDelays reads key with amqp.ParseRetryDelays, recording an error on env for a
// value it refuses; unset, it is amqp.DefaultRetryDelays.
func retryDelays(env *config.Env, key string) []time.Duration {
	raw := env.String(key, "1s,5s,30s")
	delays, err := amqp.ParseRetryDelays(raw)
	if err != nil {
		env.Errorf(key, "%q: %v", raw, err)
		return amqp.DefaultRetryDelays()
	}
	return delays
}
