package main

import (
	"log/slog"
	"strings"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/pg"
)

// serveConfig is the configuration of `auditor serve`, read from the environment. Its
// databases and metrics URLs follow the registry (contracts.Services, contracts.Consumers):
//
//	AUDITOR_<NAME>_DATABASE_URL    each service's database, read-only role (default
//	                               postgres://postgres@localhost:5432/<its database>, as the
//	                               service's own <NAME>_DATABASE_URL: orders, stock, shipping)
//	AUDITOR_<NAME>_METRICS_URL     each consumer's /metrics, for duplicates and retries
//	                               (default http://localhost<its HTTP_ADDR>/metrics: 8082, 8083)
//	AMQP_URL                       RabbitMQ, for dead-letter queue depths (default amqp://guest:guest@localhost:5672/)
//	HTTP_ADDR                      HTTP listen address (default :8085)
//	LOG_LEVEL                      debug, info, warn or error (default info)
//	AUDIT_INTERVAL                 time between two audit cycles (default 5s)
//	AUDIT_GRACE                    how long a published event may still be on its way before a
//	                               consumer without it counts it as unaccounted (default 2m; keep it
//	                               above the sum of the consumers' retry delays)
//	AUDIT_WINDOW                   how far back each cycle re-checks audited events (default 15m)
//
// <NAME> is the service's name in upper case: AUDITOR_ORDER_DATABASE_URL,
// AUDITOR_STOCK_METRICS_URL.
type serveConfig struct {
	Databases   map[string]string // service name -> database URL, one per contracts.Services
	MetricsURLs map[string]string // consumer name -> /metrics URL, one per contracts.Consumers
	AMQPURL     string
	HTTPAddr    string
	LogLevel    slog.Level
	Interval    time.Duration
	Grace       time.Duration
	Window      time.Duration
}

// loadServeConfig reads serveConfig through env; env.Err names every bad variable.
func loadServeConfig(env *config.Env) serveConfig {
	c := serveConfig{
		Databases:   map[string]string{},
		MetricsURLs: map[string]string{},
		AMQPURL:     amqp.URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL),
		HTTPAddr:    env.String("HTTP_ADDR", ":8085"),
		Interval:    env.PositiveDuration("AUDIT_INTERVAL", 5*time.Second),
		Grace:       env.PositiveDuration("AUDIT_GRACE", 2*time.Minute),
		Window:      env.PositiveDuration("AUDIT_WINDOW", 15*time.Minute),
	}
	for _, s := range contracts.Services() {
		c.Databases[s.Name] = pg.URLFromEnv(env, variable(s.Name, "DATABASE_URL"),
			"postgres://postgres@localhost:5432/"+s.Database+"?sslmode=disable")
	}
	for _, con := range contracts.Consumers() {
		s, _ := contracts.ServiceNamed(con.Name) // every consumer is a service (contracts' test)
		c.MetricsURLs[con.Name] = env.String(variable(con.Name, "METRICS_URL"), "http://localhost"+s.HTTPAddr+"/metrics")
	}
	c.LogLevel = logging.LevelFromEnv(env)
	return c
}

// variable is the auditor's variable for service's setting, e.g. AUDITOR_STOCK_DATABASE_URL.
func variable(service, setting string) string {
	return "AUDITOR_" + strings.ToUpper(strings.ReplaceAll(service, "-", "_")) + "_" + setting
}

// LogValue logs the configuration with the passwords masked.
func (c serveConfig) LogValue() slog.Value {
	dbs := make([]slog.Attr, 0, len(c.Databases))
	for _, s := range contracts.Services() {
		dbs = append(dbs, slog.String(s.Name, config.MaskURL(c.Databases[s.Name])))
	}
	return slog.GroupValue(
		slog.Attr{Key: "database_urls", Value: slog.GroupValue(dbs...)},
		slog.String("amqp_url", config.MaskURL(c.AMQPURL)),
		slog.Any("metrics_urls", c.MetricsURLs),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Duration("audit_interval", c.Interval),
		slog.Duration("audit_grace", c.Grace),
		slog.Duration("audit_window", c.Window),
	)
}
