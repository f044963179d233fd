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
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/logging"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
)

// serviceReplay names the replay command in its log lines.
const serviceReplay = "order-replay-outbox"

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

// loadReplayConfig reads replayConfig through env; env.Err names every bad
// variable, and refuses a replay horizon longer than the consumers' dedup horizon:
// a replayed event whose key a consumer may have purged would be applied again.
func loadReplayConfig(env *config.Env) replayConfig {
	c := replayConfig{
		DatabaseURL:  pg.URLFromEnv(env, "ORDER_DATABASE_URL", defaultDatabaseURL),
		Horizon:      env.PositiveDuration("OUTBOX_REPLAY_HORIZON", outbox.DefaultReplayHorizon),
		MinRetention: env.PositiveDuration("INBOX_MIN_RETENTION", outbox.DefaultReplayHorizon),
		LogLevel:     logging.LevelFromEnv(env),
	}
	if c.Horizon > c.MinRetention {
		env.Errorf("OUTBOX_REPLAY_HORIZON", "%v exceeds INBOX_MIN_RETENTION (%v): consumers may have purged the keys of "+
			"events that old, and would apply them again", c.Horizon, c.MinRetention)
	}
	return c
}

// runReplayOutbox puts the published outbox rows whose occurred_at falls in
// [--since, --until) back in line for the relay (outbox.Replay), optionally only
// those of --event-name, and prints how many; --dry-run only counts them. A
// --since older than OUTBOX_REPLAY_HORIZON is refused unless --force
// (docs/architecture.md rule 5). The relay, running or started later, publishes
// them again with their event ids; consumers count them as duplicates.
func runReplayOutbox(ctx context.Context, f replayFlags, getenv func(string) string, stdout, stderr io.Writer) error {
	req, err := replayRequest(f.since, f.until, f.eventName, f.dryRun, f.force)
	if err != nil {
		return cli.Usagef("replay-outbox", "replay-outbox: %w", err)
	}
	cfg, err := config.Load(getenv, loadReplayConfig)
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
	// A flag is missing when it was not given (an empty value), never because its time
	// is the zero time.Time: 0001-01-01T00:00:00Z is a valid start.
	parsed := 0
	parse := func(flagName, v string) time.Time {
		if v == "" {
			errs = append(errs, fmt.Errorf("--%s is required (RFC 3339, such as 2026-12-01T10:00:00Z)", flagName))
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s %q is not an RFC 3339 time such as 2026-12-01T10:00:00Z", flagName, v))
			return time.Time{}
		}
		parsed++
		return t
	}
	req.Since, req.Until = parse("since", since), parse("until", until)
	if parsed == 2 && !req.Since.Before(req.Until) {
		errs = append(errs, fmt.Errorf("--since %s is not before --until %s: the period [since, until) is empty", since, until))
	}
	if eventName != "" && !slices.Contains(contracts.EventNames(), eventName) {
		errs = append(errs, fmt.Errorf("--event-name %q is not one of %s", eventName, strings.Join(contracts.EventNames(), ", ")))
	}
	if len(errs) > 0 {
		// One line: the caller prefixes it with the command's name.
		msgs := make([]string, len(errs))
		for i, err := range errs {
			msgs[i] = err.Error()
		}
		return req, errors.New(strings.Join(msgs, "; "))
	}
	return req, nil
}
