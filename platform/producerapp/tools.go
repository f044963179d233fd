package producerapp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
)

// PurgeOutboxCommand is `<name> purge-outbox --older-than D`: it deletes the
// outbox rows published longer ago than D (required, > 0), then, when
// Service.IdempotencyConsumer is set, the API's Idempotency-Keys older than
// the same horizon, and prints how many of each it deleted
// (docs/architecture.md, rule 5). Unpublished rows are never deleted. A D
// shorter than OUTBOX_REPLAY_HORIZON is refused (exit 1): a typo such as
// --older-than 2m cannot wipe what replay-outbox and retried
// Idempotency-Keys still need.
func (s Service) PurgeOutboxCommand(getenv func(string) string, stdout, stderr io.Writer) cli.Command {
	var olderThan time.Duration
	summary := "delete outbox rows published longer ago than --older-than"
	if s.IdempotencyConsumer != "" {
		summary = "delete outbox rows published, and Idempotency-Keys used, longer ago than --older-than"
	}
	return cli.Command{
		Name:    "purge-outbox",
		Summary: summary,
		Flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&olderThan, "older-than", 0, "delete rows published longer ago than this `duration` (for example 168h); required")
		},
		Env: func(env *config.Env) { s.LoadPurgeConfig(env) },
		Run: func(ctx context.Context, _ []string) error {
			return s.purgeOutbox(ctx, olderThan, getenv, stdout, stderr)
		},
	}
}

func (s Service) purgeOutbox(ctx context.Context, olderThan time.Duration, getenv func(string) string, stdout, stderr io.Writer) error {
	if olderThan <= 0 {
		return cli.Usagef("purge-outbox", "purge-outbox: --older-than must be a positive duration such as 168h, got %v", olderThan)
	}
	cfg, err := config.Load(getenv, s.LoadPurgeConfig)
	if err != nil {
		return err
	}
	if olderThan < cfg.ReplayHorizon {
		// A shorter horizon would delete rows replay-outbox must still find and
		// Idempotency-Keys a client may still retry with (a retry would create anew).
		return fmt.Errorf("purge-outbox: --older-than %s is shorter than OUTBOX_REPLAY_HORIZON (%s): "+
			"published rows and Idempotency-Keys are kept as long as a period can be replayed",
			olderThan, cfg.ReplayHorizon)
	}
	logger := logging.New(stderr, cfg.LogLevel, s.Name+"-purge-outbox")
	pool, err := pg.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	n, err := outbox.Purge(ctx, pool, olderThan)
	logger.InfoContext(ctx, "outbox purged", slog.Int64("rows", n), slog.Duration("older_than", olderThan),
		slog.Duration("took", time.Since(start)), slog.Any("error", err))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "purged %d outbox rows published more than %v ago\n", n, olderThan)
	if s.IdempotencyConsumer == "" {
		return nil
	}
	// The API's Idempotency-Keys share the horizon: a retry older than it creates anew.
	keys, err := inbox.Purge(ctx, pool, s.IdempotencyConsumer, olderThan)
	logger.InfoContext(ctx, "idempotency keys purged", slog.Int64("rows", keys), slog.Any("error", err))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "purged %d idempotency keys used more than %v ago\n", keys, olderThan)
	return nil
}

// replayFlags are the flags of replay-outbox.
type replayFlags struct {
	since, until, eventName string
	dryRun, force           bool
}

// declare adds the flags to fs.
func (f *replayFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&f.since, "since", "", "start of the period of occurred_at, `RFC3339` (inclusive); required")
	fs.StringVar(&f.until, "until", "", "end of the period of occurred_at, `RFC3339` (exclusive); required")
	fs.StringVar(&f.eventName, "event-name", "", "replay only this event `name` (default: every event)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "count the rows, change nothing")
	fs.BoolVar(&f.force, "force", false, "accept a --since older than OUTBOX_REPLAY_HORIZON")
}

// ReplayOutboxCommand is `<name> replay-outbox --since T --until T
// [--event-name N] [--dry-run] [--force]`: it puts the published outbox rows
// whose occurred_at falls in [--since, --until) back in line for the relay
// (outbox.Replay), optionally only those of --event-name, and prints how
// many; --dry-run only counts them. A --since older than
// OUTBOX_REPLAY_HORIZON is refused unless --force (docs/architecture.md rule
// 5). The relay, running or started later, publishes them again with their
// event ids; consumers count them as duplicates.
func (s Service) ReplayOutboxCommand(getenv func(string) string, stdout, stderr io.Writer) cli.Command {
	var f replayFlags
	return cli.Command{
		Name:    "replay-outbox",
		Summary: "put published outbox rows of a period back in line for the relay (docs/architecture.md, rule 5)",
		Flags:   f.declare,
		Env:     func(env *config.Env) { s.LoadReplayConfig(env) },
		Run: func(ctx context.Context, _ []string) error {
			return s.replayOutbox(ctx, f, getenv, stdout, stderr)
		},
	}
}

func (s Service) replayOutbox(ctx context.Context, f replayFlags, getenv func(string) string, stdout, stderr io.Writer) error {
	req, err := f.request()
	if err != nil {
		return cli.Usagef("replay-outbox", "replay-outbox: %w", err)
	}
	cfg, err := config.Load(getenv, s.LoadReplayConfig)
	if err != nil {
		return err
	}
	req.Horizon = cfg.ReplayHorizon
	if err := req.Validate(); err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, s.Name+"-replay-outbox")
	pool, err := pg.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	start := time.Now()
	res, err := outbox.Replay(ctx, pool, req)
	logger.InfoContext(ctx, "outbox replay", slog.Time("since", req.Since), slog.Time("until", req.Until),
		slog.String("event_name", req.EventName), slog.Bool("dry_run", req.DryRun), slog.Bool("force", req.Force),
		slog.Int64("replayed", res.Replayed), slog.Int64("pending", res.Pending),
		slog.Duration("took", time.Since(start)), slog.Any("error", err))
	if err != nil {
		return err
	}
	what, verb := "events", "replayed"
	if req.EventName != "" {
		what = req.EventName + " events"
	}
	if req.DryRun {
		verb = "would replay"
	}
	fmt.Fprintf(stdout, "%s %d published %s with occurred_at in [%s, %s)\n", verb, res.Replayed, what,
		req.Since.UTC().Format(time.RFC3339Nano), req.Until.UTC().Format(time.RFC3339Nano))
	if res.Pending > 0 {
		fmt.Fprintf(stdout, "%d events of the period are not published yet; the relay sends them anyway\n", res.Pending)
	}
	return nil
}

// request checks the flags of replay-outbox and builds the request; its
// error names every bad flag on one line.
func (f replayFlags) request() (outbox.ReplayRequest, error) {
	req := outbox.ReplayRequest{EventName: f.eventName, DryRun: f.dryRun, Force: f.force}
	var errs []string
	// A flag is missing when it was not given (an empty value), never because its time
	// is the zero time.Time: 0001-01-01T00:00:00Z is a valid start.
	parsed := 0
	parse := func(flagName, v string) time.Time {
		if v == "" {
			errs = append(errs, fmt.Sprintf("--%s is required (RFC 3339, such as 2026-12-01T10:00:00Z)", flagName))
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("--%s %q is not an RFC 3339 time such as 2026-12-01T10:00:00Z", flagName, v))
			return time.Time{}
		}
		parsed++
		return t
	}
	req.Since, req.Until = parse("since", f.since), parse("until", f.until)
	if parsed == 2 && !req.Since.Before(req.Until) {
		errs = append(errs, fmt.Sprintf("--since %s is not before --until %s: the period [since, until) is empty", f.since, f.until))
	}
	if f.eventName != "" && !slices.Contains(contracts.EventNames(), f.eventName) {
		errs = append(errs, fmt.Sprintf("--event-name %q is not one of %s", f.eventName, strings.Join(contracts.EventNames(), ", ")))
	}
	if len(errs) > 0 {
		return req, errors.New(strings.Join(errs, "; "))
	}
	return req, nil
}
