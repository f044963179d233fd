package consumerapp

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

// Settings is every setting of a consuming service's binary, read from the
// environment. <PREFIX> is the upper-case Spec.Name (STOCK, SHIPPING):
//
//	<PREFIX>_DATABASE_URL   PostgreSQL URL (default Spec.DatabaseURL); without
//	                        pool_max_conns, serve's pool gets one connection per inbox
//	                        transaction that can run at once, plus 4
//	AMQP_URL                RabbitMQ URL (default amqp://guest:guest@localhost:5672/)
//	HTTP_ADDR               HTTP listen address (default Spec.HTTPAddr)
//	LOG_LEVEL               debug, info, warn or error (default info)
//	<PREFIX>_WORKERS        deliveries handled at once (default Defaults.Workers)
//	<PREFIX>_PREFETCH       deliveries the broker sends ahead (default 4 * <PREFIX>_WORKERS)
//	<PREFIX>_INBOX_GROUP    most events committed in one transaction
//	                        (inbox.WithGroupCommit; default Defaults.InboxGroup, 1 = off)
//	<PREFIX>_INBOX_TX       inbox transactions at once when grouping (default Defaults.InboxTx)
//	<PREFIX>_MAX_ATTEMPTS   deliveries of a failing event before it is dead-lettered (default 5)
//	<PREFIX>_RETRY_DELAYS   comma-separated delay per retry level, each a whole number of
//	                        milliseconds >= 1ms (default 1s,5s,30s)
//	INBOX_MIN_RETENTION     shortest horizon purge-inbox accepts (default 168h; docs/architecture.md, rule 5)
//	AMQP_REDECLARE_INTERVAL how often the service declares its queue, bindings, retry and
//	                        dead-letter queues again, repairing what was deleted (default 5s)
//
// Counts must be positive whole numbers and durations positive Go durations ("90s").
type Settings struct {
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
	// RedeclareInterval is amqp.Options.RedeclareInterval of the consuming connection.
	RedeclareInterval time.Duration
}

// Prefix returns the prefix of spec's own variables: the upper-case Name and "_",
// e.g. "STOCK_".
func Prefix(spec Spec) string {
	return strings.ToUpper(spec.Name) + "_"
}

// LoadSettings reads spec's Settings through getenv. The error (a join of
// *config.VarError) names every variable whose value cannot be used.
func LoadSettings(spec Spec, getenv func(string) string) (Settings, error) {
	p := Prefix(spec)
	d := spec.Defaults
	env := config.NewEnv(getenv)
	s := Settings{
		DatabaseURL:  env.String(p+"DATABASE_URL", spec.DatabaseURL),
		AMQPURL:      env.String("AMQP_URL", config.DefaultAMQPURL),
		HTTPAddr:     env.String("HTTP_ADDR", spec.HTTPAddr),
		Workers:      env.PositiveInt(p+"WORKERS", orDefault(d.Workers, 8)),
		InboxGroup:   env.PositiveInt(p+"INBOX_GROUP", orDefault(d.InboxGroup, 1)),
		InboxTx:      env.PositiveInt(p+"INBOX_TX", orDefault(d.InboxTx, 2)),
		MaxAttempts:  env.PositiveInt(p+"MAX_ATTEMPTS", 5),
		MinRetention: env.PositiveDuration("INBOX_MIN_RETENTION", 168*time.Hour),

		RedeclareInterval: env.PositiveDuration("AMQP_REDECLARE_INTERVAL", 5*time.Second),
	}
	s.Prefetch = env.PositiveInt(p+"PREFETCH", 4*s.Workers)
	s.LogLevel = logging.LevelFromEnv(env)
	s.RetryDelays = amqp.DefaultRetryDelays()
	if raw := env.String(p+"RETRY_DELAYS", ""); raw != "" {
		delays, err := parseDelays(raw)
		if err != nil {
			env.Errorf(p+"RETRY_DELAYS", "%q: %v", raw, err)
		} else {
			s.RetryDelays = delays
		}
	}
	return s, env.Err()
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
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
// transaction that can run at once, and 4 for HTTP and readiness checks.
func (s Settings) poolSize() int {
	if s.InboxGroup > 1 {
		return min(s.InboxTx, s.Workers) + 4
	}
	return s.Workers + 4
}

// withPoolSize adds pool_max_conns=n to a postgres:// URL that does not set it, so
// every worker can hold a connection. Other forms are returned unchanged. Only
// pgxpool understands the parameter: a plain connection (the one migrate uses) sends
// it to the server, which refuses it.
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
