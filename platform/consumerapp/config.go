// Package consumerapp assembles the binary of a service that consumes events
// through an inbox: its consumer role (Service.Consumer), the configuration and
// `serve` of a service whose API waits for the broker, and the one-shot commands
// `migrate`, `purge-inbox` and `dlq`. A service whose API writes to an outbox
// mounts producerapp's serve with the consumer role behind it instead. A service
// names itself with a Service value; the package names no service.
package consumerapp

import (
	"log/slog"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/dlq"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
)

// Service names one consuming service and the defaults of its variables.
type Service struct {
	// Name is the binary, the inbox consumer (processed_event.consumer,
	// dead_letter.consumer), the contract's consumer and the service attribute of
	// the log lines, e.g. "stock".
	Name string
	// EnvPrefix starts the service's own variables, underscore included:
	// <EnvPrefix>DATABASE_URL, WORKERS, PREFETCH, INBOX_GROUP, INBOX_TX,
	// MAX_ATTEMPTS, RETRY_DELAYS; e.g. "STOCK_".
	EnvPrefix string
	// DatabaseURL and HTTPAddr are the defaults of <EnvPrefix>DATABASE_URL and HTTP_ADDR;
	// HTTPAddr only for a service that mounts ServeCommand (a service whose API
	// writes to an outbox mounts producerapp's serve, with Service.Consumer).
	DatabaseURL, HTTPAddr string
	// Workers and InboxGroup are the defaults of <EnvPrefix>WORKERS and
	// <EnvPrefix>INBOX_GROUP (1 = group commit off).
	Workers, InboxGroup int
	// Schema is the service's database schema, the platform's sets it uses, then its
	// own: `migrate` applies it, and so does serve first when MIGRATE_ON_START is true.
	Schema migrate.Schema
	// Stale, when set, is the service's own word on whether a dead-lettered event
	// has been overtaken by its state (its order_status version): `dlq replay`
	// reports such an event as "stale: will change nothing".
	Stale dlq.Stale
}

// Defaults of the variables every consuming service reads alike.
const (
	// DefaultMinRetention is INBOX_MIN_RETENTION's default (docs/architecture.md rule 5).
	DefaultMinRetention = 168 * time.Hour
	// DefaultRedeclareInterval is AMQP_REDECLARE_INTERVAL's default.
	DefaultRedeclareInterval = 5 * time.Second
	defaultInboxTx           = 2
	defaultMaxAttempts       = 5
	defaultRetryDelays       = "1s,5s,30s"
)

// ServeConfig is the configuration of `<name> serve`, read from the environment
// by Service.LoadServeConfig:
//
//	<P>DATABASE_URL        PostgreSQL URL (default Service.DatabaseURL); without
//	                        pool_max_conns, the pool gets PoolSize connections
//	HTTP_ADDR               HTTP listen address (default Service.HTTPAddr)
//	LOG_LEVEL               debug, info, warn or error (default info)
//	MIGRATE_ON_START        apply Service.Schema before serving (default false)
//
// then the consumer's variables, ConsumeConfig's.
type ServeConfig struct {
	DatabaseURL    string
	HTTPAddr       string
	LogLevel       slog.Level
	MigrateOnStart bool
	ConsumeConfig
}

// ConsumeConfig is the configuration of the consumer, in the serve that mounts it
// (ServeCommand, or producerapp's with Service.Consumer), read from the
// environment by Consumer.LoadConfig:
//
//	AMQP_URL                RabbitMQ URL (default amqp://guest:guest@localhost:5672/)
//	<P>WORKERS             deliveries handled at once (default Service.Workers)
//	<P>INBOX_GROUP         most events committed in one transaction (inbox.WithGroupCommit;
//	                        default Service.InboxGroup, 1 = off)
//	<P>INBOX_TX            inbox transactions at once when grouping (default 2)
//	<P>MAX_ATTEMPTS        deliveries of a failing event before it is dead-lettered (default 5)
//	<P>RETRY_DELAYS        comma-separated delay per retry level, whole milliseconds >= 1ms
//	                        (default 1s,5s,30s)
//	INBOX_MIN_RETENTION     shortest horizon purge-inbox and dlq replay accept (default 168h;
//	                        docs/architecture.md rule 5)
//	AMQP_REDECLARE_INTERVAL how often serve declares its queue, bindings, retry and
//	                        dead-letter queues again, repairing what was deleted (default 5s)
//	AMQP_HEARTBEAT          heartbeat timeout serve proposes to the broker, whole seconds: a
//	                        frozen serve's deliveries go to another within 3 times it (default
//	                        5s; amqp.Options.Heartbeat)
//	<P>PREFETCH            deliveries the broker sends ahead (default 4 * <P>WORKERS)
//	RELAY_USERS             the broker user of each producer's relay, "producer=user,...", e.g.
//	                        "order=order-relay,stock=stock-relay": an event is accepted only
//	                        with that user_id (docs/architecture.md rule 8); unset, any user
//	                        (every event must still come through app.events)
//
// <P> is Service.EnvPrefix, e.g. "STOCK_". Counts are positive whole numbers, durations positive
// Go durations ("90s").
type ConsumeConfig struct {
	AMQPURL           string
	Workers           int
	Prefetch          int
	InboxGroup        int
	InboxTx           int
	MaxAttempts       int
	RetryDelays       []time.Duration
	MinRetention      time.Duration
	RedeclareInterval time.Duration
	Heartbeat         time.Duration
	RelayUsers        map[string]string
}

// LoadServeConfig reads ServeConfig through env, in the order listed on
// ServeConfig; env.Err names every bad variable.
func (s Service) LoadServeConfig(env *config.Env) ServeConfig {
	return ServeConfig{
		DatabaseURL:    pg.URLFromEnv(env, s.EnvPrefix+"DATABASE_URL", s.DatabaseURL),
		HTTPAddr:       env.String("HTTP_ADDR", s.HTTPAddr),
		LogLevel:       logging.LevelFromEnv(env),
		MigrateOnStart: env.Bool("MIGRATE_ON_START", false),
		ConsumeConfig:  s.loadConsumeConfig(env),
	}
}

// loadConsumeConfig reads ConsumeConfig through env, in the order listed on it.
func (s Service) loadConsumeConfig(env *config.Env) ConsumeConfig {
	c := ConsumeConfig{
		AMQPURL:           amqp.URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL),
		Workers:           env.PositiveInt(s.EnvPrefix+"WORKERS", s.Workers),
		InboxGroup:        env.PositiveInt(s.EnvPrefix+"INBOX_GROUP", s.InboxGroup),
		InboxTx:           env.PositiveInt(s.EnvPrefix+"INBOX_TX", defaultInboxTx),
		MaxAttempts:       env.PositiveInt(s.EnvPrefix+"MAX_ATTEMPTS", defaultMaxAttempts),
		RetryDelays:       retryDelays(env, s.EnvPrefix+"RETRY_DELAYS"),
		MinRetention:      env.PositiveDuration("INBOX_MIN_RETENTION", DefaultMinRetention),
		RedeclareInterval: env.PositiveDuration("AMQP_REDECLARE_INTERVAL", DefaultRedeclareInterval),
		Heartbeat:         amqp.HeartbeatFromEnv(env, "AMQP_HEARTBEAT"),
	}
	c.Prefetch = env.PositiveInt(s.EnvPrefix+"PREFETCH", 4*c.Workers)
	c.RelayUsers = relayUsers(env)
	return c
}

// PoolSize is the number of database connections the consumer's serve needs: one
// per inbox transaction that can run at once, and 4 for HTTP and readiness checks.
func (c ConsumeConfig) PoolSize() int {
	if c.InboxGroup > 1 {
		return min(c.InboxTx, c.Workers) + 4
	}
	return c.Workers + 4
}

// LogValue logs the configuration with the passwords masked.
func (c ServeConfig) LogValue() slog.Value {
	return slog.GroupValue(append([]slog.Attr{
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Bool("migrate_on_start", c.MigrateOnStart),
	}, c.ConsumeConfig.LogValue().Group()...)...)
}

// LogValue logs the configuration with the password masked.
func (c ConsumeConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("amqp_url", config.MaskURL(c.AMQPURL)),
		slog.Int("workers", c.Workers), slog.Int("prefetch", c.Prefetch),
		slog.Int("inbox_group", c.InboxGroup), slog.Int("inbox_tx", c.InboxTx),
		slog.Int("max_attempts", c.MaxAttempts), slog.Any("retry_delays", c.RetryDelays),
		slog.Duration("min_retention", c.MinRetention),
		slog.Duration("redeclare_interval", c.RedeclareInterval),
		slog.Duration("heartbeat", c.Heartbeat),
		slog.Any("relay_users", c.RelayUsers),
	)
}

// ToolConfig is the configuration of the one-shot commands migrate, purge-inbox
// and dlq: <P>DATABASE_URL, LOG_LEVEL, INBOX_MIN_RETENTION (purge-inbox and dlq),
// AMQP_URL and RELAY_USERS (dlq only), with the defaults of ServeConfig and
// ConsumeConfig.
type ToolConfig struct {
	DatabaseURL  string
	AMQPURL      string
	LogLevel     slog.Level
	MinRetention time.Duration
	RelayUsers   map[string]string
}

// LoadMigrateConfig reads what migrate needs through env.
func (s Service) LoadMigrateConfig(env *config.Env) ToolConfig {
	return ToolConfig{DatabaseURL: pg.URLFromEnv(env, s.EnvPrefix+"DATABASE_URL", s.DatabaseURL), LogLevel: logging.LevelFromEnv(env)}
}

// LoadPurgeConfig reads what purge-inbox needs through env.
func (s Service) LoadPurgeConfig(env *config.Env) ToolConfig {
	c := s.LoadMigrateConfig(env)
	c.MinRetention = env.PositiveDuration("INBOX_MIN_RETENTION", DefaultMinRetention)
	return c
}

// LoadDLQConfig reads what dlq needs through env.
func (s Service) LoadDLQConfig(env *config.Env) ToolConfig {
	c := s.LoadPurgeConfig(env)
	c.AMQPURL = amqp.URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL)
	c.RelayUsers = relayUsers(env)
	return c
}

// relayUsers reads RELAY_USERS with inbox.ParseRelayUsers, recording an error on
// env for a value it refuses; unset, it is nil (any user).
func relayUsers(env *config.Env) map[string]string {
	raw := env.String("RELAY_USERS", "")
	users, err := inbox.ParseRelayUsers(raw)
	if err != nil {
		env.Errorf("RELAY_USERS", "%q: %v", raw, err)
	}
	return users
}

// Publishers is who may publish the events serve and dlq accept: through
// app.events, by the relay users of c.RelayUsers (docs/architecture.md, rule 8).
func Publishers(relayUsers map[string]string) inbox.Publishers {
	return inbox.Publishers{Exchange: contracts.Exchange, Users: relayUsers}
}

// retryDelays reads key with amqp.ParseRetryDelays, recording an error on env for
// a value it refuses; unset, it is amqp.DefaultRetryDelays.
func retryDelays(env *config.Env, key string) []time.Duration {
	raw := env.String(key, defaultRetryDelays)
	delays, err := amqp.ParseRetryDelays(raw)
	if err != nil {
		env.Errorf(key, "%q: %v", raw, err)
		return amqp.DefaultRetryDelays()
	}
	return delays
}
