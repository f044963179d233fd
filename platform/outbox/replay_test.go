package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
)

// setRow moves a row to occurred_at and marks it published (or not).
func setRow(t *testing.T, pool *pgxpool.Pool, id string, occurred time.Time, published bool) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `UPDATE outbox SET occurred_at = $2,
		published_at = CASE WHEN $3 THEN now() END WHERE id = $1`, id, occurred, published); err != nil {
		t.Fatal(err)
	}
}

// replays returns every row's replay counter and whether it is published.
func replays(t *testing.T, pool *pgxpool.Pool) map[string][2]int {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT id::text, replays, (published_at IS NOT NULL)::int FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int{}
	var id string
	var n, pub int
	if _, err := pgx.ForEachRow(rows, []any{&id, &n, &pub}, func() error {
		out[id] = [2]int{n, pub}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReplayPutsPublishedRowsOfThePeriodBackInLine(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	ctx := t.Context()
	base := time.Now().Add(-48 * time.Hour).Truncate(time.Millisecond)
	since, until := base, base.Add(time.Hour)

	in1 := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "in-1")
	in2 := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "in-2")
	atUntil := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "at-until")
	before := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "before")
	pending := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "pending")
	cancelled := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "cancelled")
	setRow(t, pool, in1, since, true) // Since is inclusive
	setRow(t, pool, in2, since.Add(30*time.Minute), true)
	setRow(t, pool, atUntil, until, true) // Until is exclusive
	setRow(t, pool, before, since.Add(-time.Millisecond), true)
	setRow(t, pool, pending, since.Add(time.Minute), false)
	setRow(t, pool, cancelled, since.Add(2*time.Minute), true)
	if _, err := pool.Exec(ctx, `UPDATE outbox SET event_name = $2 WHERE id = $1`, cancelled, contracts.EventOrderCancelled); err != nil {
		t.Fatal(err)
	}

	req := ReplayRequest{Since: since, Until: until, EventName: contracts.EventOrderPlaced, DryRun: true}
	res, err := Replay(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	if res != (ReplayResult{Replayed: 2, Pending: 1}) {
		t.Fatalf("dry run: %+v, want 2 to replay and 1 pending", res)
	}
	for id, s := range replays(t, pool) {
		if s[0] != 0 || (id != pending && s[1] != 1) {
			t.Fatalf("dry run changed row %s: replays %d, published %d", id, s[0], s[1])
		}
	}

	req.DryRun = false
	if res, err = Replay(ctx, pool, req); err != nil {
		t.Fatal(err)
	}
	if res != (ReplayResult{Replayed: 2, Pending: 1}) {
		t.Fatalf("replay: %+v, want 2 replayed and 1 pending", res)
	}
	want := map[string][2]int{
		in1: {1, 0}, in2: {1, 0}, atUntil: {0, 1}, before: {0, 1}, pending: {0, 0}, cancelled: {0, 1},
	}
	got := replays(t, pool)
	for id, w := range want {
		if got[id] != w {
			t.Errorf("row %s: replays %d, published %d; want %d, %d", id, got[id][0], got[id][1], w[0], w[1])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: replay must not add rows", len(got), len(want))
	}

	// Published again by the relay, then replayed again without a name: the
	// counter grows on the same row, and the other event name is taken too.
	if _, err := pool.Exec(ctx, `UPDATE outbox SET published_at = now() WHERE published_at IS NULL AND id <> $1`, pending); err != nil {
		t.Fatal(err)
	}
	req.EventName = ""
	if res, err = Replay(ctx, pool, req); err != nil || res.Replayed != 3 {
		t.Fatalf("second replay: %+v, %v; want 3 replayed", res, err)
	}
	got = replays(t, pool)
	if got[in1][0] != 2 || got[in2][0] != 2 || got[cancelled][0] != 1 {
		t.Fatalf("counters after the second replay: %v", got)
	}
}

func TestReplayTakesEachRowOnceAcrossChunks(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	ctx := t.Context()
	const n = 2*replayChunk + 7
	start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	// Many rows share one occurred_at, so chunks must break ties by id.
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
		SELECT gen_random_uuid(), 'e', 'e', '{}', $2::timestamptz + (g / 100) * interval '1 ms', now()
		FROM generate_series(1, $1) AS g`, n, start); err != nil {
		t.Fatal(err)
	}
	// A trigger stands in for a relay that publishes each chunk again at once:
	// a replayed row becomes published again as soon as its chunk commits.
	if _, err := pool.Exec(ctx, `CREATE TABLE replayed (id uuid);
		CREATE FUNCTION note_replay() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO replayed VALUES (NEW.id); NEW.published_at := now(); RETURN NEW; END $$;
		CREATE TRIGGER note_replay BEFORE UPDATE OF published_at ON outbox
		FOR EACH ROW WHEN (NEW.published_at IS NULL) EXECUTE FUNCTION note_replay()`); err != nil {
		t.Fatal(err)
	}
	res, err := Replay(ctx, pool, ReplayRequest{Since: start, Until: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed != n {
		t.Fatalf("replayed %d rows, want %d", res.Replayed, n)
	}
	var rows, distinct, maxReplays int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), (SELECT max(replays) FROM outbox) FROM replayed`).
		Scan(&rows, &distinct, &maxReplays); err != nil {
		t.Fatal(err)
	}
	if rows != n || distinct != n || maxReplays != 1 {
		t.Fatalf("%d replays of %d distinct rows, max counter %d; want each of %d rows once", rows, distinct, maxReplays, n)
	}
}

func TestReplayWakesTheRelay(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	ctx := t.Context()
	id := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "x")
	setRow(t, pool, id, time.Now().Add(-time.Minute), true)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		t.Fatal(err)
	}
	if _, err := Replay(ctx, pool, ReplayRequest{Since: time.Now().Add(-time.Hour), Until: time.Now()}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := conn.Conn().WaitForNotification(wctx); err != nil {
		t.Fatalf("no NOTIFY on %s after a replay: %v", NotifyChannel, err)
	}
}

func TestReplayRefusesABadPeriodAndOneBeyondTheHorizon(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ok := ReplayRequest{Since: now.Add(-24 * time.Hour), Until: now, Now: now}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a period within the horizon: %v", err)
	}
	old := ok
	old.Since = now.Add(-DefaultReplayHorizon - time.Second)
	if err := old.Validate(); !errors.Is(err, ErrBeyondHorizon) {
		t.Fatalf("since beyond the default horizon: %v, want ErrBeyondHorizon", err)
	}
	old.Force = true
	if err := old.Validate(); err != nil {
		t.Fatalf("forced: %v", err)
	}
	short := ok
	short.Horizon = time.Hour
	if err := short.Validate(); !errors.Is(err, ErrBeyondHorizon) {
		t.Fatalf("since beyond a 1h horizon: %v", err)
	}
	for name, r := range map[string]ReplayRequest{
		"reversed":         {Since: now, Until: now.Add(-time.Hour), Now: now},
		"empty":            {Since: now, Until: now, Now: now},
		"no until":         {Since: now.Add(-time.Hour), Now: now},
		"negative horizon": {Since: now.Add(-time.Hour), Until: now, Horizon: -time.Hour, Now: now},
	} {
		if err := r.Validate(); err == nil || errors.Is(err, ErrBeyondHorizon) {
			t.Errorf("%s: %v, want a request error", name, err)
		}
	}
	// The zero time is a time like any other: from the beginning, forced.
	all := ReplayRequest{Until: now, Now: now, Force: true}
	if err := all.Validate(); err != nil {
		t.Fatalf("since the zero time, forced: %v", err)
	}
	if err := all.withoutForce().Validate(); !errors.Is(err, ErrBeyondHorizon) {
		t.Fatalf("since the zero time: %v, want ErrBeyondHorizon", err)
	}
	// Replay validates before it touches the database (nil pool).
	if _, err := Replay(t.Context(), nil, old.withoutForce()); err == nil || !strings.Contains(err.Error(), "horizon") {
		t.Fatalf("Replay beyond the horizon: %v", err)
	}
}

func (r ReplayRequest) withoutForce() ReplayRequest { r.Force = false; return r }

func TestRelayPublishesReplayedRowsAgainInOrderWithTheirIDs(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	ctx := t.Context()
	topo := testTopology(t)
	in := consume(t, topo.Queues[0].Name)
	r := newTestRelay(t, pool, newPublisher(t, topo), fastConfig())
	start(t, r)

	const n = 20
	for i := range n {
		insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "e"+string(rune('a'+i)))
	}
	first := receive(t, in, n)
	eventually(t, "every row marked published", func() bool { return countUnpublished(t, pool) == 0 })

	// One row written after the period stays published: it is not replayed.
	cut := time.Now()
	time.Sleep(10 * time.Millisecond) // occurred_at is cut to milliseconds
	insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "later")
	receive(t, in, 1)
	eventually(t, "the later row published", func() bool { return countUnpublished(t, pool) == 0 })

	res, err := Replay(ctx, pool, ReplayRequest{Since: time.Now().Add(-time.Hour), Until: cut})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed != n {
		t.Fatalf("replayed %d, want %d", res.Replayed, n)
	}
	again := receive(t, in, n)
	if extra := drain(in, 300*time.Millisecond); len(extra) > 0 {
		t.Fatalf("%d messages more than replayed", len(extra))
	}
	for i := range first {
		if again[i].MessageId != first[i].MessageId || string(again[i].Body) != string(first[i].Body) {
			t.Fatalf("replayed message %d is %s, first sent as %s: same ids, bodies and order expected",
				i, again[i].MessageId, first[i].MessageId)
		}
	}
	eventually(t, "replayed rows marked published again", func() bool { return countUnpublished(t, pool) == 0 })
}
