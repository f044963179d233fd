package outbox

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The relay's statements are planned for each run: a relay that starts on a
// small outbox and then sees it grow, with no ANALYZE in between (autovacuum
// has not come by yet, or is off), reads none of the published rows. With
// PostgreSQL's plan cache, its sessions kept the sequential scans they were
// given while the table was small, and every batch then read the whole table.
func TestRelayReadsNoPublishedRowOfAGrowingOutbox(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
	topo := testTopology(t)
	start(t, newTestRelay(t, pool, newPublisher(t, topo), fastConfig()))
	publishOne := func() {
		t.Helper()
		id := insertEvent(t, ctx, pool, topo.Queues[0].RoutingKeys[0], "c")
		eventually(t, "the row published", func() bool {
			var published bool // planned for this run: the test reads no row sequentially either
			err := pool.QueryRow(ctx, `SELECT published_at IS NOT NULL FROM outbox WHERE id = $1`, pgx.QueryExecModeExec, id).Scan(&published)
			return err == nil && published
		})
	}
	for range 40 { // on every session of the pool, more runs than the 5 after which PostgreSQL may cache a generic plan
		publishOne()
	}

	const grown = 20000
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
		SELECT gen_random_uuid(), 'e', 'k', '{}', now() - interval '1 day', now() FROM generate_series(1, $1::int)`, grown); err != nil {
		t.Fatal(err)
	}
	type counters struct{ seqRead, updated int64 }
	read := func() (c counters) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT seq_tup_read, n_tup_upd FROM pg_stat_user_tables WHERE relname = 'outbox'`).
			Scan(&c.seqRead, &c.updated); err != nil {
			t.Fatal(err)
		}
		return c
	}
	before := read()
	const batches = 5
	for range batches {
		publishOne()
	}
	// The relay's sessions send their statistics within about a second of a transaction.
	var after counters
	eventually(t, "the statistics of the relay's marks", func() bool {
		after = read()
		return after.updated >= before.updated+batches
	})
	if n := after.seqRead - before.seqRead; n >= grown {
		t.Errorf("the relay read %d rows sequentially over %d batches of one row, in an outbox of %d published rows: a whole-table scan per statement", n, batches, grown)
	}
}

// Under batchSettingsSQL, every statement of a batch transaction walks an
// index: none scans the table or makes a bitmap of outbox_unpublished_idx,
// neither in the plans PostgreSQL caches after five runs on a small table nor
// once the table has grown past them.
func TestRelayStatementsWalkTheirIndexes(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	run := func(sql string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	run(batchSettingsSQL, "60000")
	statements := map[string]string{
		"batch": `PREPARE batch AS ` + selectBatchSQL, "after": `PREPARE after AS ` + selectAfterSQL,
		"head": `PREPARE head AS ` + headSQL, "mark": `PREPARE mark AS ` + markPublishedSQL,
	}
	executions := map[string]string{
		"batch": `EXECUTE batch(100, 1, 0)`,
		"after": `EXECUTE after(100, 1, 0, now(), '00000000-0000-7000-8000-000000000000')`,
		"head":  `EXECUTE head(1, 0)`,
		"mark":  `EXECUTE mark(ARRAY[gen_random_uuid()])`,
	}
	for name, sql := range statements {
		run(sql)
		for range 7 { // PostgreSQL may cache a generic plan after five runs
			run(executions[name])
		}
	}
	run(`INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
		SELECT gen_random_uuid(), 'e', 'k', '{}', now() - interval '1 day', now() FROM generate_series(1, 20000)`)
	run(`INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at)
		SELECT gen_random_uuid(), 'e', 'k', '{}', now() FROM generate_series(1, 50)`)
	for name, sql := range executions {
		var plan string
		rows, err := tx.Query(ctx, `EXPLAIN (COSTS OFF) `+sql)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan += line + "\n"
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, bad := range []string{"Seq Scan", "Bitmap", "Sort"} {
			if strings.Contains(plan, bad) {
				t.Errorf("%s: the plan has a %s:\n%s", name, bad, plan)
			}
		}
		if !strings.Contains(plan, "Index Scan") {
			t.Errorf("%s: the plan walks no index:\n%s", name, plan)
		}
	}
}
