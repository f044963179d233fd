// Package producerapp assembles the commands of a service that publishes its
// events through an outbox (docs/architecture.md, rules 2 and 5): `relay`,
// which publishes the outbox, `purge-outbox` and `replay-outbox`. A service
// names itself with a Service value and mounts the commands beside its own;
// package consumerapp is the same for the consuming side. A service whose API
// writes to the outbox mounts this package's `serve` (its HTTP API over its
// database, ready without the broker), with its consumer role behind the API
// when it also consumes (consumerapp.Service.Consumer). The package names no
// service.
package producerapp

import (
	"log/slog"
	"time"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
)

// Service names one producing service and the defaults of its variables.
type Service struct {
	// Name is the binary; the log lines' service attribute is
	// <Name>-relay, <Name>-purge-outbox or <Name>-replay-outbox, and the
	// relay names `<Name> migrate` while it waits for the outbox table.
	// For example "order".
	Name string
	// EnvPrefix starts the service's own variables, underscore included:
	// <EnvPrefix>DATABASE_URL, e.g. "ORDER_".
	EnvPrefix string
	// DatabaseURL is the default of <EnvPrefix>DATABASE_URL, RelayHTTPAddr
	// the default of the relay's HTTP_ADDR (health and metrics).
	DatabaseURL, RelayHTTPAddr string
	// HTTPAddr is the default of serve's HTTP_ADDR, and Schema the service's
	// database schema (the outbox's set, then its own), which serve applies
	// with MIGRATE_ON_START: both only for a service that mounts ServeCommand.
	// MigrateCommand applies Schema too; a service that consumes mounts
	// consumerapp's instead, with the same Schema.
	HTTPAddr string
	Schema   migrate.Schema
	// IdempotencyConsumer, when set, is the processed_event consumer under
	// which the service's API keeps its Idempotency-Keys: purge-outbox
	// deletes them with the outbox's horizon, since a retry older than the
	// horizon creates anew (docs/architecture.md, rule 5).
	IdempotencyConsumer string
}

// RelayConfig is the configuration of `<name> relay`, read from the
// environment by Service.LoadRelayConfig:
//
//	<P>DATABASE_URL        PostgreSQL URL of the service's database (default Service.DatabaseURL)
//	AMQP_URL               RabbitMQ URL (default amqp://guest:guest@localhost:5672/)
//	AMQP_HEARTBEAT         heartbeat timeout proposed to the broker, whole seconds (default 5s;
//	                       amqp.Options.Heartbeat)
//	HTTP_ADDR              address of /healthz, /readyz and /metrics (default Service.RelayHTTPAddr)
//	RELAY_PARTITIONS       outbox partitions, each led by one relay and published in order on its
//	                       own; every relay of one database must use the same value: one with
//	                       another value joins once the others' lock sessions have ended
//	                       (default 1)
//	RELAY_BATCH_SIZE       rows per batch of one partition (default 500)
//	RELAY_POLL_INTERVAL    wait without NOTIFY before looking anyway; first wait after a failed batch (default 1s)
//	RELAY_MAX_BACKOFF      cap of the doubling wait between attempts after failed batches (default 10s)
//	RELAY_CONFIRM_TIMEOUT  bound on publishing one batch, confirms included (default 5s)
//	RELAY_STALL_TIMEOUT    a leader failing to publish for this long makes /readyz answer 503 (default 15s)
//	RELAY_LOCK_RETRY       how often a relay looks at who leads which partition: takes free ones, gives extra back (default 1s)
//	RELAY_LOCK_TIMEOUT     idle_session_timeout of the relay's lock session: a frozen relay loses its partitions after it (default 5s)
//	RELAY_LOCK_KEEPALIVE   how often the relay talks to its lock session at the least; at most half of RELAY_LOCK_TIMEOUT (default 1s)
//	RELAY_DECLARE_QUEUES   also declare the consumers' queues and app.events.unroutable (default
//	                       true); false declares only the exchanges, for a broker user that may
//	                       not read the queues nor app.events.alternate (deploy/rabbitmq/definitions.json)
//	LOG_LEVEL              debug, info, warn or error (default info)
//
// <P> is Service.EnvPrefix. Durations are Go durations such as 500ms, 5s or 1m.
type RelayConfig struct {
	DatabaseURL string
	AMQPURL     string
	Heartbeat   time.Duration
	HTTPAddr    string
	LogLevel    slog.Level
	Relay       outbox.RelayConfig
	// DeclareQueues: declare every consumer's queue (Topology), not only the exchanges.
	DeclareQueues bool
}

// LoadRelayConfig reads RelayConfig through env; env.Err names every bad variable.
func (s Service) LoadRelayConfig(env *config.Env) RelayConfig {
	c := RelayConfig{
		DatabaseURL: pg.URLFromEnv(env, s.EnvPrefix+"DATABASE_URL", s.DatabaseURL),
		AMQPURL:     amqp.URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL),
		Heartbeat:   amqp.HeartbeatFromEnv(env, "AMQP_HEARTBEAT"),
		HTTPAddr:    env.String("HTTP_ADDR", s.RelayHTTPAddr),
		LogLevel:    logging.LevelFromEnv(env),
		// Declaring a queue with a dead-letter exchange needs the right to read it.
		DeclareQueues: env.Bool("RELAY_DECLARE_QUEUES", true),
		Relay: outbox.RelayConfig{
			Partitions:     env.PositiveInt("RELAY_PARTITIONS", outbox.DefaultPartitions),
			BatchSize:      env.PositiveInt("RELAY_BATCH_SIZE", outbox.DefaultBatchSize),
			PollInterval:   env.PositiveDuration("RELAY_POLL_INTERVAL", outbox.DefaultPollInterval),
			MaxBackoff:     env.PositiveDuration("RELAY_MAX_BACKOFF", outbox.DefaultMaxBackoff),
			ConfirmTimeout: env.PositiveDuration("RELAY_CONFIRM_TIMEOUT", outbox.DefaultConfirmTimeout),
			StallTimeout:   env.PositiveDuration("RELAY_STALL_TIMEOUT", outbox.DefaultStallTimeout),
			LockRetry:      env.PositiveDuration("RELAY_LOCK_RETRY", outbox.DefaultLockRetry),
			LockTimeout:    env.PositiveDuration("RELAY_LOCK_TIMEOUT", outbox.DefaultLockTimeout),
			LockKeepalive:  env.PositiveDuration("RELAY_LOCK_KEEPALIVE", outbox.DefaultLockKeepalive),
		},
	}
	if c.Relay.Partitions > outbox.MaxPartitions {
		env.Errorf("RELAY_PARTITIONS", "%d is more than %d", c.Relay.Partitions, outbox.MaxPartitions)
	}
	if 2*c.Relay.LockKeepalive > c.Relay.LockTimeout {
		env.Errorf("RELAY_LOCK_KEEPALIVE", "%v is more than half of RELAY_LOCK_TIMEOUT (%v)", c.Relay.LockKeepalive, c.Relay.LockTimeout)
	}
	return c
}

// LogValue logs the configuration with the passwords masked.
func (c RelayConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("database_url", config.MaskURL(c.DatabaseURL)),
		slog.String("amqp_url", config.MaskURL(c.AMQPURL)),
		slog.Duration("heartbeat", c.Heartbeat),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("log_level", c.LogLevel.String()),
		slog.Int("partitions", c.Relay.Partitions),
		slog.Int("batch_size", c.Relay.BatchSize),
		slog.Duration("poll_interval", c.Relay.PollInterval),
		slog.Duration("max_backoff", c.Relay.MaxBackoff),
		slog.Duration("confirm_timeout", c.Relay.ConfirmTimeout),
		slog.Duration("stall_timeout", c.Relay.StallTimeout),
		slog.Duration("lock_retry", c.Relay.LockRetry),
		slog.Duration("lock_timeout", c.Relay.LockTimeout),
		slog.Duration("lock_keepalive", c.Relay.LockKeepalive),
	)
}

// ToolConfig is the configuration of purge-outbox and replay-outbox, read
// from the environment by Service.LoadPurgeConfig and LoadReplayConfig:
//
//	<P>DATABASE_URL        PostgreSQL URL of the service's database (default Service.DatabaseURL)
//	OUTBOX_REPLAY_HORIZON  oldest --since replay-outbox accepts without --force, back from now,
//	                       and the shortest --older-than purge-outbox accepts (default 168h)
//	INBOX_MIN_RETENTION    replay-outbox only: the consumers' shortest processed_event horizon
//	                       (default 168h, as theirs); OUTBOX_REPLAY_HORIZON must not exceed it
//	LOG_LEVEL              debug, info, warn or error (default info)
type ToolConfig struct {
	DatabaseURL   string
	LogLevel      slog.Level
	ReplayHorizon time.Duration
	MinRetention  time.Duration
}

// LoadPurgeConfig reads what purge-outbox needs through env.
func (s Service) LoadPurgeConfig(env *config.Env) ToolConfig {
	return ToolConfig{
		DatabaseURL:   pg.URLFromEnv(env, s.EnvPrefix+"DATABASE_URL", s.DatabaseURL),
		LogLevel:      logging.LevelFromEnv(env),
		ReplayHorizon: env.PositiveDuration("OUTBOX_REPLAY_HORIZON", outbox.DefaultReplayHorizon),
	}
}

// LoadReplayConfig reads what replay-outbox needs through env; it refuses a
// replay horizon longer than the consumers' dedup horizon: a replayed event
// whose key a consumer may have purged would be applied again.
func (s Service) LoadReplayConfig(env *config.Env) ToolConfig {
	c := ToolConfig{
		DatabaseURL:   pg.URLFromEnv(env, s.EnvPrefix+"DATABASE_URL", s.DatabaseURL),
		ReplayHorizon: env.PositiveDuration("OUTBOX_REPLAY_HORIZON", outbox.DefaultReplayHorizon),
		MinRetention:  env.PositiveDuration("INBOX_MIN_RETENTION", outbox.DefaultReplayHorizon),
		LogLevel:      logging.LevelFromEnv(env),
	}
	if c.ReplayHorizon > c.MinRetention {
		env.Errorf("OUTBOX_REPLAY_HORIZON", "%v exceeds INBOX_MIN_RETENTION (%v): consumers may have purged the keys of "+
			"events that old, and would apply them again", c.ReplayHorizon, c.MinRetention)
	}
	return c
}
