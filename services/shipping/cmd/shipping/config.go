package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
)

// settings is every setting of the shipping binary, read from the environment:
//
//	SHIPPING_DATABASE_URL   PostgreSQL URL (default postgres://postgres@localhost:5432/shipping?sslmode=disable);
//	                        without pool_max_conns the serve pool gets SHIPPING_WORKERS + 4 connections
//	AMQP_URL                RabbitMQ URL (default amqp://guest:guest@localhost:5672/)
//	HTTP_ADDR               HTTP listen address (default :8083)
//	LOG_LEVEL               debug, info, warn or error (default info)
//	SHIPPING_WORKERS        deliveries handled at once (default 8)
//	SHIPPING_PREFETCH       deliveries the broker sends ahead (default 4 * SHIPPING_WORKERS)
//	SHIPPING_MAX_ATTEMPTS   deliveries of a failing event before it is dead-lettered (default 5)
//	SHIPPING_RETRY_DELAYS   comma-separated delay per retry level (default 1s,5s,30s)
//	INBOX_MIN_RETENTION     shortest horizon purge-inbox accepts (default 168h)
type settings struct {
	DatabaseURL  string
	AMQPURL      string
	HTTPAddr     string
	LogLevel     slog.Level
	Workers      int
	Prefetch     int
	MaxAttempts  int
	RetryDelays  []time.Duration
	MinRetention time.Duration
}

// loadSettings reads settings through getenv. The error names every variable
// whose value cannot be used.
func loadSettings(getenv func(string) string) (settings, error) {
	env := config.NewEnv(getenv)
	s := settings{
		DatabaseURL:  env.String("SHIPPING_DATABASE_URL", config.DefaultShippingDatabaseURL),
		AMQPURL:      env.String("AMQP_URL", config.DefaultAMQPURL),
		HTTPAddr:     env.String("HTTP_ADDR", config.DefaultShippingHTTPAddr),
		Workers:      env.PositiveInt("SHIPPING_WORKERS", 8),
		MaxAttempts:  env.PositiveInt("SHIPPING_MAX_ATTEMPTS", 5),
		MinRetention: env.PositiveDuration("INBOX_MIN_RETENTION", 168*time.Hour),
	}
	s.Prefetch = env.PositiveInt("SHIPPING_PREFETCH", 4*s.Workers)
	level, err := logging.ParseLevel(env.String("LOG_LEVEL", "info"))
	if err != nil {
		env.Errorf("LOG_LEVEL", "%v", err)
	}
	s.LogLevel = level
	s.RetryDelays = amqp.DefaultRetryDelays()
	if raw := env.String("SHIPPING_RETRY_DELAYS", ""); raw != "" {
		delays, err := parseDelays(raw)
		if err != nil {
			env.Errorf("SHIPPING_RETRY_DELAYS", "%q: %v", raw, err)
		} else {
			s.RetryDelays = delays
		}
	}
	return s, env.Err()
}

// parseDelays parses "50ms,100ms,200ms": at least one delay, each a whole
// number of milliseconds >= 1 ms (the retry queues' x-message-ttl).
func parseDelays(raw string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(raw, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("%s is not a whole number of milliseconds >= 1ms", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// withPoolSize adds pool_max_conns=n to a postgres:// URL that does not set
// it, so every worker can hold a connection. Other forms are returned
// unchanged. Only pgxpool understands the parameter: a plain connection (the
// one migrate uses) sends it to the server, which refuses it.
func withPoolSize(raw string, n int) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return raw
	}
	q := u.Query()
	if q.Has("pool_max_conns") {
		return raw
	}
	q.Set("pool_max_conns", strconv.Itoa(n))
	u.RawQuery = q.Encode()
	return u.String()
}
