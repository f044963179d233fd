package main

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
	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
)

// serviceReplay names the replay command in its log lines.
const serviceReplay = "order-replay-outbox"

const replayUsage = "usage: order replay-outbox --since RFC3339 --until RFC3339 [--event-name NAME] [--dry-run] [--force]"

// replayConfig is the configuration of `order replay-outbox`, read from the environment:
//
//	ORDER_DATABASE_URL     PostgreSQL URL of the order database (default postgres://postgres@localhost:5432/orders?sslmode=disable)
//	OUTBOX_REPLAY_HORIZON  oldest --since accepted without --force, back from now (default 168h)
//	INBOX_MIN_RETENTION    the consumers' shortest processed_event horizon (default 168h, as theirs);
//	                       OUTBOX_REPLAY_HORIZON must not exceed it
//	LOG_LEVEL              debug, info, warn or error (default info)
type replayConfig struct {
	DatabaseURL  string
	Horizon      time.Duration
	MinRetention time.Duration
	LogLevel     slog.Level
}

// loadReplayConfig reads replayConfig through getenv. The error names every bad
// variable, and refuses a replay horizon longer than the consumers' dedup horizon:
// a replayed event whose key a consumer may have purged would be applied again.
func loadReplayConfig(getenv func(string) string) (replayConfig, error) {
	env := config.NewEnv(getenv)
	c := replayConfig{
		DatabaseURL:  env.String("ORDER_DATABASE_URL", config.DefaultOrderDatabaseURL),
		Horizon:      env.PositiveDuration("OUTBOX_REPLAY_HORIZON", outbox.DefaultReplayHorizon),
		MinRetention: env.PositiveDuration("INBOX_MIN_RETENTION", outbox.DefaultReplayHorizon),
		LogLevel:     logging.LevelFromEnv(env),
	}
	if c.Horizon > c.MinRetention {
		env.Errorf("OUTBOX_REPLAY_HORIZON", "%v exceeds INBOX_MIN_RETENTION (%v): consumers may have purged the keys of "+
			"events that old, and would apply them again", c.Horizon, c.MinRetention)
	}
	return c, env.Err()
}

// runReplayOutbox puts the published outbox rows whose occurred_at falls in
// [--since, --until) back in line for the relay (outbox.Replay), optionally only
// those of --event-name, and prints how many; --dry-run only counts them. A
// --since older than OUTBOX_REPLAY_HORIZON is refused unless --force
// (docs/architecture.md rule 5). The relay, running or started later, publishes
// them again with their event ids; consumers count them as duplicates.
func runReplayOutbox(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay-outbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), replayUsage)
		fs.PrintDefaults()
	}
	since := fs.String("since", "", "start of the period of occurred_at, RFC 3339 (inclusive); required")
	until := fs.String("until", "", "end of the period of occurred_at, RFC 3339 (exclusive); required")
	eventName := fs.String("event-name", "", "replay only this event name (default: every event)")
	dryRun := fs.Bool("dry-run", false, "count the rows, change nothing")
	force := fs.Bool("force", false, "accept a --since older than OUTBOX_REPLAY_HORIZON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("replay-outbox: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("replay-outbox: unexpected argument %q; %s", fs.Arg(0), replayUsage)
	}
	req, err := replayRequest(*since, *until, *eventName, *dryRun, *force)
	if err != nil {
		return err
	}
	cfg, err := loadReplayConfig(getenv)
	if err != nil {
		return err
	}
	req.Horizon = cfg.Horizon
	if err := req.Validate(); err != nil {
		return err
	}
	logger := logging.New(stderr, cfg.LogLevel, serviceReplay)

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
	what := "events"
	if req.EventName != "" {
		what = req.EventName + " events"
	}
	verb := "replayed"
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

// replayRequest checks the flags of replay-outbox and builds the request.
func replayRequest(since, until, eventName string, dryRun, force bool) (outbox.ReplayRequest, error) {
	req := outbox.ReplayRequest{EventName: eventName, DryRun: dryRun, Force: force}
	var errs []error
	parse := func(flagName, v string) time.Time {
		if v == "" {
			errs = append(errs, fmt.Errorf("--%s is required (RFC 3339, such as 2026-12-01T10:00:00Z)", flagName))
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s %q is not an RFC 3339 time such as 2026-12-01T10:00:00Z", flagName, v))
		}
		return t
	}
	req.Since, req.Until = parse("since", since), parse("until", until)
	if eventName != "" && !slices.Contains(contracts.EventNames(), eventName) {
		errs = append(errs, fmt.Errorf("--event-name %q is not one of %s", eventName, strings.Join(contracts.EventNames(), ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		return req, fmt.Errorf("replay-outbox: %w; %s", err, replayUsage)
	}
	return req, nil
}
