package main

import (
	"log/slog"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/pg"
)

// serveConfig is the configuration of `auditor serve`, read from the environment:
//
//	AUDITOR_ORDER_DATABASE_URL     order database, read-only role (default as ORDER_DATABASE_URL's)
//	AUDITOR_STOCK_DATABASE_URL     stock database (default as STOCK_DATABASE_URL's)
//	AUDITOR_SHIPPING_DATABASE_URL  shipping database (default as SHIPPING_DATABASE_URL's)
//	AMQP_URL                       RabbitMQ, for dead-letter queue depths (default amqp://guest:guest@localhost:5672/)
//	AUDITOR_STOCK_METRICS_URL      stock's /metrics, for duplicates and retries (default http://localhost:8082/metrics)
//	AUDITOR_SHIPPING_METRICS_URL   shipping's /metrics (default http://localhost:8083/metrics)
//	HTTP_ADDR                      HTTP listen address (default :8085)
//	LOG_LEVEL                      debug, info, warn or error (default info)
//	AUDIT_INTERVAL                 time between two audit cycles (default 5s)
//	AUDIT_GRACE                    how long a published event may still be on its way before a
//	                               consumer without it counts it as unaccounted (default 2m; keep it
//	                               above the sum of the consumers' retry delays)
//	AUDIT_WINDOW                   how far back each cycle re-checks audited events (default 15m)
type serveConfig struct {
	OrderDatabaseURL string
	ConsumerDBs      map[string]string // consumer name -> database URL
	MetricsURLs      map[string]string // consumer name -> /metrics URL
	AMQPURL          string
	HTTPAddr         string
	LogLevel         slog.Level
	Interval         time.Duration
	Grace            time.Duration
	Window           time.Duration
}

// loadServeConfig reads serveConfig through env; env.Err names every bad variable.
func loadServeConfig(env *config.Env) serveConfig {
	c := serveConfig{
		OrderDatabaseURL: pg.URLFromEnv(env, "AUDITOR_ORDER_DATABASE_URL", "postgres://postgres@localhost:5432/orders?sslmode=disable"),
		ConsumerDBs: map[string]string{
			contracts.ConsumerStock:    pg.URLFromEnv(env, "AUDITOR_STOCK_DATABASE_URL", "postgres://postgres@localhost:5432/stock?sslmode=disable"),
			contracts.ConsumerShipping: pg.URLFromEnv(env, "AUDITOR_SHIPPING_DATABASE_URL", "postgres://postgres@localhost:5432/shipping?sslmode=disable"),
		},
		MetricsURLs: map[string]string{
			contracts.ConsumerStock:    env.String("AUDITOR_STOCK_METRICS_URL", "http://localhost:8082/metrics"),
			contracts.ConsumerShipping: env.String("AUDITOR_SHIPPING_METRICS_URL", "http://localhost:8083/metrics"),
		},
		AMQPURL:  amqp.URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL),
		HTTPAddr: env.String("HTTP_ADDR", ":8085"),
		Interval: env.PositiveDuration("AUDIT_INTERVAL", 5*time.Second),
		Grace:    env.PositiveDuration("AUDIT_GRACE", 2*time.Minute),
		Window:   env.PositiveDuration("AUDIT_WINDOW", 15*time.Minute),
	}
	c.LogLevel = logging.LevelFromEnv(env)
	return c
}

// LogValue logs the configuration with the passwords masked.
func (c serveConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("order_database_url", config.MaskURL(c.OrderDatabaseURL)),
		slog.String("stock_database_url", config.MaskURL(c.ConsumerDBs[contracts.ConsumerStock])),
		slog.String("shipping_database_url", config.MaskURL(c.ConsumerDBs[contracts.ConsumerShipping])),
		slog.String("amqp_url", config.MaskURL(c.AMQPURL)),
		slog.Any("metrics_urls", c.MetricsURLs),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Duration("audit_interval", c.Interval),
		slog.Duration("audit_grace", c.Grace),
		slog.Duration("audit_window", c.Window),
	)
}
