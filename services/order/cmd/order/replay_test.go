package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/outbox"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

// TestReplayOutboxCommand runs replay-outbox as order_maintenance on a migrated
// database: a dry run counts and changes nothing, a replay puts the period's
// published rows back in line and says how many.
func TestReplayOutboxCommand(t *testing.T) {
	t.Parallel()
	testkit.ApplySQLFile(t, "../../../../deploy/postgres/roles.sql")
	pool, url := testkit.NewDatabase(t, migrations.Schema)
	ctx := t.Context()
	day := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Second)
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
		SELECT gen_random_uuid(), $1, $1, '{}', $2::timestamptz + g * interval '1 minute', now()
		FROM generate_series(0, 9) AS g`, contracts.EventOrderPlaced, day); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"ORDER_DATABASE_URL": testkit.URLAs(t, url, "order_maintenance")}
	args := []string{"order", "replay-outbox", "--since", day.Format(time.RFC3339), "--until", day.Add(5 * time.Minute).Format(time.RFC3339)}

	var out bytes.Buffer
	if err := run(ctx, append(args, "--dry-run"), env(vars), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "would replay 5 published events") {
		t.Fatalf("dry run printed %q", out.String())
	}
	out.Reset()
	if err := run(ctx, append(args, "--event-name", contracts.EventOrderPlaced), env(vars), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "replayed 5 published "+contracts.EventOrderPlaced+" events") {
		t.Fatalf("replay printed %q", out.String())
	}
	var inLine, counted int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL), sum(replays) FROM outbox`).
		Scan(&inLine, &counted); err != nil {
		t.Fatal(err)
	}
	if inLine != 5 || counted != 5 {
		t.Fatalf("%d rows in line with %d replays counted, want 5 and 5", inLine, counted)
	}
}

func TestReplayOutboxRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now().UTC()
	recent, old := now.Add(-time.Hour).Format(time.RFC3339), now.Add(-200*time.Hour).Format(time.RFC3339)
	until := now.Format(time.RFC3339)
	for _, tc := range []struct {
		name string
		args []string
		vars map[string]string
		want string
	}{
		{"no since", []string{"--until", until}, nil, "--since is required"},
		{"not RFC 3339", []string{"--since", "yesterday", "--until", until}, nil, `--since "yesterday" is not an RFC 3339 time`},
		{"reversed", []string{"--since", until, "--until", recent}, nil, "is not before"},
		{"unknown event", []string{"--since", recent, "--until", until, "--event-name", "order.placed"}, nil, `--event-name "order.placed" is not one of`},
		{"beyond the horizon", []string{"--since", old, "--until", until}, nil, "replay horizon"},
		{"beyond a shorter horizon", []string{"--since", recent, "--until", until},
			map[string]string{"OUTBOX_REPLAY_HORIZON": "30m"}, "replay horizon"},
		{"horizon past the consumers' retention", []string{"--since", recent, "--until", until},
			map[string]string{"OUTBOX_REPLAY_HORIZON": "720h"}, "exceeds INBOX_MIN_RETENTION"},
		{"extra argument", []string{"--since", recent, "--until", until, "now"}, nil, `unexpected argument "now"`},
	} {
		err := run(ctx, append([]string{"order", "replay-outbox"}, tc.args...), env(tc.vars), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	// A period that is empty or reversed is a usage error (exit 2), as a bad flag is.
	zero := time.Time{}.Format(time.RFC3339) // 0001-01-01T00:00:00Z: given, so not missing
	for _, period := range [][2]string{{until, recent}, {recent, recent}, {zero, zero}, {recent, zero}} {
		err := run(ctx, []string{"order", "replay-outbox", "--since", period[0], "--until", period[1]}, env(nil), io.Discard, io.Discard)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || ue.Help != "replay-outbox" || !strings.HasPrefix(err.Error(), "replay-outbox: --since ") {
			t.Errorf("since %s, until %s: %v, want a usage error of replay-outbox", period[0], period[1], err)
		}
	}
	// The horizon error is outbox.ErrBeyondHorizon; --force lifts it (the command
	// then fails only on the missing database).
	args := []string{"order", "replay-outbox", "--since", old, "--until", until}
	if err := run(ctx, args, env(nil), io.Discard, io.Discard); !errors.Is(err, outbox.ErrBeyondHorizon) {
		t.Errorf("beyond the horizon: %v, want outbox.ErrBeyondHorizon", err)
	}
	vars := map[string]string{"ORDER_DATABASE_URL": testkit.EmptyDatabaseURL(t)}
	if err := run(ctx, append(args, "--force"), env(vars), io.Discard, io.Discard); err == nil || errors.Is(err, outbox.ErrBeyondHorizon) {
		t.Errorf("forced: %v, want only a database error", err)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"order", "replay-outbox", "--help"}, env(nil), &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "--since RFC3339") {
		t.Errorf("--help: %v, %q", err, out.String())
	}
}
