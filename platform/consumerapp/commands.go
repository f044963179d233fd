package consumerapp

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/dlq"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
)

// contract is the service's consumer in contracts.Consumers: its queue and
// dead-letter queue. A Service whose Name the contract does not know gets a
// Consumer with only its Name, so that a command reports the missing queue
// instead of the binary failing to start.
func (s Service) contract() contracts.Consumer {
	c, ok := contracts.ConsumerNamed(s.Name)
	if !ok {
		return contracts.Consumer{Name: s.Name}
	}
	return c
}

// Commands are the consumer's four commands, in the order its help lists
// them: serve (with the service's handlers and routes) and Tools. getenv reads
// the environment, stdout takes a command's output and stderr its JSON log
// lines.
func (s Service) Commands(getenv func(string) string, stdout, stderr io.Writer, handlers Handlers, routes httpx.Routes) []cli.Command {
	return append([]cli.Command{s.ServeCommand(getenv, stderr, handlers, routes)}, s.Tools(getenv, stdout, stderr)...)
}

// Tools are the consumer's one-shot commands, in the order its help lists
// them: migrate, purge-inbox and dlq; a service that mounts producerapp's serve
// mounts them beside it.
func (s Service) Tools(getenv func(string) string, stdout, stderr io.Writer) []cli.Command {
	return []cli.Command{s.MigrateCommand(getenv, stderr), s.PurgeInboxCommand(getenv, stdout), s.DLQCommand(getenv, stdout, stderr)}
}

// MigrateCommand is `<name> migrate` (migrate.Command): it creates the service's
// database if it is missing and applies Service.Schema, the platform's sets it uses,
// then its own.
func (s Service) MigrateCommand(getenv func(string) string, stderr io.Writer) cli.Command {
	return migrate.Command(s.Name, s.EnvPrefix, s.DatabaseURL, s.Schema, getenv, stderr)
}

// PurgeInboxCommand is `<name> purge-inbox --older-than D`: it deletes the
// service's processed_event keys older than D (docs/architecture.md rule 5) and
// prints how many on stdout. It refuses a missing or non-positive D (a
// *cli.UsageError) and one below INBOX_MIN_RETENTION: a key must outlive every
// copy of its message (retries, dead-letter replays), or that copy would be
// applied again. A failure reports how many keys were deleted before it.
func (s Service) PurgeInboxCommand(getenv func(string) string, stdout io.Writer) cli.Command {
	var olderThan time.Duration
	return cli.Command{
		Name:    "purge-inbox",
		Summary: "delete processed_event keys older than --older-than (at least INBOX_MIN_RETENTION)",
		Flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&olderThan, "older-than", 0, "delete keys processed longer ago than this `duration` (e.g. 720h); required")
		},
		Env: func(env *config.Env) { s.LoadPurgeConfig(env) },
		Run: func(ctx context.Context, _ []string) error {
			return s.purgeInbox(ctx, getenv, olderThan, stdout)
		},
	}
}

func (s Service) purgeInbox(ctx context.Context, getenv func(string) string, olderThan time.Duration, stdout io.Writer) error {
	cfg, err := config.Load(getenv, s.LoadPurgeConfig)
	if err != nil {
		return err
	}
	switch {
	case olderThan <= 0:
		return cli.Usagef("purge-inbox", "purge-inbox: --older-than DURATION is required and positive (e.g. --older-than 720h)")
	case olderThan < cfg.MinRetention:
		return fmt.Errorf("purge-inbox: --older-than %s is shorter than INBOX_MIN_RETENTION (%s): "+
			"keys must be kept longer than any copy of a message can come back (retries, dead-letter replays)",
			olderThan, cfg.MinRetention)
	}
	pool, err := pg.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	n, err := inbox.Purge(ctx, pool, s.Name, olderThan)
	if err != nil {
		return fmt.Errorf("purge-inbox: %d keys deleted before the failure: %w", n, err)
	}
	fmt.Fprintf(stdout, "purged %d processed_event keys older than %s in %s\n", n, olderThan, time.Since(start).Round(time.Millisecond))
	return nil
}

// DLQCommand is `<name> dlq list|show|replay|drop|undrop ...` (package dlq) on the
// service's dead-letter queue, with INBOX_MIN_RETENTION as the horizon past which
// replay refuses a message, and the consumer's own check of a delivery
// (dlq.ContractCheck): replay, --dry-run included, refuses a message the consumer
// would dead-letter again, and says why, and reports an event Service.Stale calls
// stale. dlq.Run states its guarantees and errors.
func (s Service) DLQCommand(getenv func(string) string, stdout, stderr io.Writer) cli.Command {
	c := s.contract()
	return cli.Command{
		Name:    "dlq",
		Args:    "list|show|replay|drop|undrop ...",
		Summary: "read, replay or drop the messages of " + c.DeadLetterQueue,
		Help:    "subcommands: " + dlq.Usage,
		Env:     func(env *config.Env) { s.LoadDLQConfig(env) },
		Raw:     true,
		Run: func(ctx context.Context, args []string) error {
			cfg, err := config.Load(getenv, s.LoadDLQConfig)
			if err != nil {
				return err
			}
			validator, err := contracts.NewValidator()
			if err != nil {
				return err
			}
			pubs := Publishers(cfg.RelayUsers)
			return dlq.Run(ctx, dlq.Config{
				Consumer: s.Name, Queue: c.Queue, DeadLetterQueue: c.DeadLetterQueue,
				DatabaseURL: cfg.DatabaseURL, AMQPURL: cfg.AMQPURL, Horizon: cfg.MinRetention,
				Check:  dlq.ContractCheck(validator, c, pubs),
				Vouch:  pubs.Vouched,
				Stale:  s.Stale,
				Logger: logging.New(stderr, cfg.LogLevel, s.Name+"-dlq"),
				Env:    func(env *config.Env) { s.LoadDLQConfig(env) },
			}, args, stdout, stderr)
		},
	}
}
