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

// settings holds every setting of the stock binary, read from the environment:
//
//	STOCK_DATABASE_URL   PostgreSQL URL (default postgres://postgres@localhost:5432/stock?sslmode=disable);
//	                     without pool_max_conns, serve's pool gets one connection per
//	                     inbox transaction that can run at once, plus 4
//	AMQP_URL             RabbitMQ URL (default amqp://guest:guest@localhost:5672/)
//	HTTP_ADDR            HTTP listen address (default :8082)
//	LOG_LEVEL            debug, info, warn or error (default info)
//	STOCK_WORKERS        deliveries handled at once (default 32)
//	STOCK_PREFETCH       deliveries the broker sends ahead (default 4 * STOCK_WORKERS)
//	STOCK_INBOX_GROUP    most events committed in one transaction (inbox.WithGroupCommit; default 16, 1 = off)
//	STOCK_INBOX_TX       inbox transactions at once when grouping (default 2)
//	STOCK_MAX_ATTEMPTS   deliveries of a failing event before it is dead-lettered (default 5)
//	STOCK_RETRY_DELAYS   comma-separated delay per retry level (default 1s,5s,30s)
//	INBOX_MIN_RETENTION  shortest horizon purge-inbox accepts (default 168h)
type settings struct {
	DatabaseURL  string
	AMQPURL      string
	HTTPAddr     string
	LogLevel     slog.Level
	Workers      int
	Prefetch     int
	InboxGroup   int
	InboxTx      int
	MaxAttempts  int
	RetryDelays  []time.Duration
	MinRetention time.Duration
}

func loadSettings(getenv func(string) string) (settings, error) {
	env := config.NewEnv(getenv)
	s := settings{
		DatabaseURL:  env.String("STOCK_DATABASE_URL", config.DefaultStockDatabaseURL),
		AMQPURL:      env.String("AMQP_URL", config.DefaultAMQPURL),
		HTTPAddr:     env.String("HTTP_ADDR", config.DefaultStockHTTPAddr),
		Workers:      env.PositiveInt("STOCK_WORKERS", 32),
		InboxGroup:   env.PositiveInt("STOCK_INBOX_GROUP", 16),
		InboxTx:      env.PositiveInt("STOCK_INBOX_TX", 2),
		MaxAttempts:  env.PositiveInt("STOCK_MAX_ATTEMPTS", 5),
		MinRetention: env.PositiveDuration("INBOX_MIN_RETENTION", 168*time.Hour),
	}
	s.Prefetch = env.PositiveInt("STOCK_PREFETCH", 4*s.Workers)
	level, err := logging.ParseLevel(env.String("LOG_LEVEL", "info"))
	if err != nil {
		env.Errorf("LOG_LEVEL", "%v", err)
	}
	s.LogLevel = level
	s.RetryDelays = amqp.DefaultRetryDelays()
	if raw := env.String("STOCK_RETRY_DELAYS", ""); raw != "" {
		delays, err := parseDelays(raw)
		if err != nil {
			env.Errorf("STOCK_RETRY_DELAYS", "%q: %v", raw, err)
		} else {
			s.RetryDelays = delays
		}
	}
	return s, env.Err()
}

// parseDelays parses "50ms,100ms,200ms": at least one delay, each a whole number of
// milliseconds >= 1 ms (the retry queues' x-message-ttl).
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

// poolSize is the number of database connections serve needs: one per inbox
// transaction that can run at once, and a few for HTTP and readiness checks.
func (s settings) poolSize() int {
	if s.InboxGroup > 1 {
		return min(s.InboxTx, s.Workers) + 4
	}
	return s.Workers + 4
}

// withPoolSize adds pool_max_conns=n to a postgres:// URL that does not set it, so every
// worker can hold a connection. Other forms are returned unchanged.
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
