// Package consumerapp runs the binary of a consuming service (bin/stock, bin/shipping):
// the service describes itself in a Spec, and Run gives it the subcommands serve,
// migrate, purge-inbox and dlq, its settings and its broker topology.
package consumerapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/dlq"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
)

// Spec is what one consuming service tells Run about itself. Every field but Routes
// and Defaults is required.
type Spec struct {
	// Name names the service in lower case, e.g. "stock". Its upper-case form and an
	// underscore prefix the service's own variables (STOCK_WORKERS,
	// STOCK_DATABASE_URL, see Settings). It is also the inbox consumer under which
	// processed_event keys are written and purged, the consumer label of the metrics,
	// the service attribute of every log line and the AMQP connection name.
	Name string
	// Queue is the service's queue: its name, dead-letter queue and routing keys
	// (docs/architecture.md, "The flow"). Its RetryDelays are ignored; they come from
	// <PREFIX>_RETRY_DELAYS (see Topology).
	Queue amqp.QueueSpec
	// Migrations holds the goose SQL files of the service's database
	// (NNNNN_name.sql at the root); they must create processed_event as package
	// inbox documents.
	Migrations fs.FS
	// DatabaseURL is the default of <PREFIX>_DATABASE_URL.
	DatabaseURL string
	// HTTPAddr is the default of HTTP_ADDR, e.g. ":8082".
	HTTPAddr string
	// Defaults are the service's defaults of the consumer settings.
	Defaults Defaults
	// Register adds the service's event handlers to ib. It is called once by serve,
	// before the consumer starts.
	Register func(ib *inbox.Inbox, logger *slog.Logger)
	// Routes adds the service's HTTP routes to r, the router of httpx.NewRouter that
	// already serves /healthz, /readyz and /metrics. pool is serve's database pool.
	// Nil means no routes of its own.
	Routes func(r chi.Router, pool *pgxpool.Pool, logger *slog.Logger)
}

// Defaults are a service's defaults for the settings that tune its consumer; a zero
// field takes the value named on it.
type Defaults struct {
	// Workers is the default of <PREFIX>_WORKERS, deliveries handled at once (0: 8).
	Workers int
	// InboxGroup is the default of <PREFIX>_INBOX_GROUP, the most events committed in
	// one inbox transaction (inbox.WithGroupCommit; 0: 1, grouping off).
	InboxGroup int
	// InboxTx is the default of <PREFIX>_INBOX_TX, inbox transactions at once when
	// grouping (0: 2).
	InboxTx int
}

// validName reports whether name is lower-case letters, digits and _, starting with a
// letter, so that its upper-case form prefixes valid variable names.
func validName(name string) bool {
	for i, r := range name {
		if !('a' <= r && r <= 'z' || i > 0 && ('0' <= r && r <= '9' || r == '_')) {
			return false
		}
	}
	return name != ""
}

// check reports the Spec fields that are missing or malformed.
func (s Spec) check() error {
	var errs []error
	if !validName(s.Name) {
		errs = append(errs, fmt.Errorf("Name %q: want lower-case letters, digits and _", s.Name))
	}
	if s.Queue.Name == "" || s.Queue.DeadLetterQueue == "" || len(s.Queue.RoutingKeys) == 0 {
		errs = append(errs, errors.New("Queue: Name, DeadLetterQueue and RoutingKeys are required"))
	}
	if s.Migrations == nil {
		errs = append(errs, errors.New("Migrations is nil"))
	}
	if s.DatabaseURL == "" || s.HTTPAddr == "" {
		errs = append(errs, errors.New("DatabaseURL and HTTPAddr are required"))
	}
	if s.Register == nil {
		errs = append(errs, errors.New("Register is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consumerapp: spec: %w", err)
	}
	return nil
}

// usage is the command line of the service's binary.
func (s Spec) usage() string {
	return "usage: " + s.Name + " serve | migrate | purge-inbox --older-than DURATION | " + dlq.Usage
}

// Run is the whole program of a consuming service's binary: args are os.Args,
// getenv reads the environment (see Settings), command output goes to stdout and JSON
// logs to stderr. The subcommands are
//
//	serve                       HTTP (HTTP_ADDR) and the consumer of spec.Queue
//	migrate                     create the database if missing and apply spec.Migrations
//	purge-inbox --older-than D  delete the service's processed_event keys older than D
//	dlq list|show|replay|drop   read, replay or drop the dead-letter queue (package dlq)
//
// It returns the usage without a known subcommand, an error naming every variable
// that cannot be used, a Spec error when spec is incomplete, or the command's error.
// serve returns nil after ctx ends and everything has shut down.
func Run(ctx context.Context, spec Spec, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if err := spec.check(); err != nil {
		return err
	}
	if len(args) < 2 {
		return errors.New(spec.usage())
	}
	cfg, err := LoadSettings(spec, getenv)
	if err != nil {
		return err
	}
	// serve logs as the service ("stock"); a one-shot command as "stock-migrate" and so on.
	name := spec.Name
	if args[1] != "serve" {
		name += "-" + args[1]
	}
	logger := logging.New(stderr, cfg.LogLevel, name)
	switch cmd := args[1]; cmd {
	case "serve":
		return serve(ctx, spec, cfg, logger)
	case "migrate":
		return migrateDB(ctx, spec, cfg, logger)
	case "purge-inbox":
		return purgeInbox(ctx, spec, cfg, args[2:], stdout, stderr)
	case "dlq":
		return deadLetters(ctx, spec, cfg, args[2:], logger, stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q; %s", cmd, spec.usage())
	}
}
