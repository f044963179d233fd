package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/pg"
)

// measureGrowth measures whether table size hurts. On one order database
// it grows the outbox to each of GrowthRows published rows (INSERT ...
// SELECT generate_series, then VACUUM ANALYZE and CHECKPOINT), adds
// GrowthRelayRows unpublished rows and drains them with the pipelined
// relay. On one stock database it grows processed_event the same way and
// drains GrowthConsumerEvents placed events with bin/stock at the default
// worker count. Each run gets a fresh vhost. At the largest size it also
// records the size on disk of processed_event (table, indexes and TOAST)
// per million rows.
func (e *env) measureGrowth(ctx context.Context) error {
	if err := e.growRelay(ctx); err != nil {
		return err
	}
	return e.growConsumer(ctx)
}

func (e *env) growRelay(ctx context.Context) error {
	s := e.cfg.Sizes
	dbURL, err := e.cloneDatabase(ctx, tplOrder, "growth-relay")
	if err != nil {
		return err
	}
	pool, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	old := time.Now().Add(-30 * 24 * time.Hour)
	for i, rows := range s.GrowthRows {
		have, err := count(ctx, pool, `SELECT count(*) FROM outbox`)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := fillOutbox(ctx, pool, old.Add(time.Duration(have)*time.Millisecond), rows-have, true); err != nil {
			return err
		}
		if err := settle(ctx, pool, "outbox"); err != nil {
			return err
		}
		if err := fillOutbox(ctx, pool, time.Now().Add(-time.Hour), s.GrowthRelayRows, false); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `ANALYZE outbox`); err != nil {
			return err
		}
		e.progress("   outbox grown to %d published rows in %s", rows, time.Since(start).Round(100*time.Millisecond))
		amqpURL, err := e.vhostURL(fmt.Sprintf("growth-relay-%d", i))
		if err != nil {
			return err
		}
		rate, published, err := e.runRelay(ctx, dbURL, amqpURL, "pipelined", 0)
		if err2 := emptyVhost(amqpURL); err2 != nil {
			e.progress("   %v", err2)
		}
		if err != nil {
			return fmt.Errorf("relay at %d rows: %w", rows, err)
		}
		name := growthRelayName(rows)
		e.results.set(name, rate, fmt.Sprintf("pipelined relay, %d new rows over %d published rows", published, rows))
		e.progress("   %-28s %10.0f events/s", name, rate)
	}
	return nil
}

func (e *env) growConsumer(ctx context.Context) error {
	s := e.cfg.Sizes
	dbURL, err := e.cloneDatabase(ctx, tplStock, "growth-consumer")
	if err != nil {
		return err
	}
	pool, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	var keysFrom time.Time
	last := s.GrowthRows[len(s.GrowthRows)-1]
	for i, rows := range s.GrowthRows {
		have, err := count(ctx, pool, `SELECT count(*) FROM processed_event`)
		if err != nil {
			return err
		}
		start := time.Now()
		// The new rows come after every row already there, in key order and in
		// processed_at order, as a running consumer's arrive: filling in behind
		// the last run's rows would split index pages in half and measure that.
		// Their processed_at times end now, one microsecond apart, so they are
		// older than whatever the next consumer run processes.
		keysFrom = later(keysFrom, start)
		if err := fillProcessedEvents(ctx, pool, keysFrom, start.Add(-time.Duration(rows-have)*time.Microsecond), rows-have); err != nil {
			return err
		}
		keysFrom = keysFrom.Add(time.Duration(rows-have+1) * time.Millisecond)
		if err := settle(ctx, pool, "processed_event"); err != nil {
			return err
		}
		e.progress("   processed_event grown to %d rows in %s", rows, time.Since(start).Round(100*time.Millisecond))
		if rows == last {
			var size, heap, pkey int64
			if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('processed_event'),
	pg_relation_size('processed_event'), pg_relation_size('processed_event_pkey')`).Scan(&size, &heap, &pkey); err != nil {
				return err
			}
			mib := func(n int64) float64 { return float64(n) / float64(rows) * 1e6 / (1 << 20) }
			perMillion := mib(size)
			e.results.set("processed_event_mib_per_1m", perMillion,
				fmt.Sprintf("pg_total_relation_size at %d rows, scaled to 1M: table %.1f, primary key %.1f, the rest %.1f MiB",
					rows, mib(heap), mib(pkey), mib(size-heap-pkey)))
			e.progress("   %-28s %10.1f MiB", "processed_event_mib_per_1m", perMillion)
			before, err := uuidLayoutSize(ctx, pool)
			if err != nil {
				return err
			}
			perMillion = mib(before)
			e.results.set("processed_event_uuid_mib_per_1m", perMillion,
				fmt.Sprintf("the same %d keys in the uuid event_id layout of before the text message_key, scaled to 1M", rows))
			e.progress("   %-28s %7.1f MiB", "processed_event_uuid_mib_per_1m", perMillion)
		}
		amqpURL, err := e.vhostURL(fmt.Sprintf("growth-consumer-%d", i))
		if err != nil {
			return err
		}
		rate, _, err := e.runConsumer(ctx, stockBin, dbURL, amqpURL, s.DefaultWorkers, s.GrowthConsumerEvents, nil)
		if err2 := emptyVhost(amqpURL); err2 != nil {
			e.progress("   %v", err2)
		}
		if err != nil {
			return fmt.Errorf("consumer at %d rows: %w", rows, err)
		}
		name := growthConsumerName(rows)
		e.results.set(name, rate, fmt.Sprintf("bin/stock, STOCK_WORKERS=%d, %d events over %d processed_event rows", s.DefaultWorkers, s.GrowthConsumerEvents, rows))
		e.progress("   %-28s %10.0f events/s", name, rate)
	}
	return nil
}

// uuidLayoutSize copies the keys of processed_event into a table of the layout
// it had before message_key became text (event_id uuid, no content hash, no
// result), with the same primary key and processed_at index, and returns that
// table's pg_total_relation_size in bytes, then drops it: the "before" of the
// disk cost of text keys.
func uuidLayoutSize(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	const table = "bench_processed_event_uuid"
	for _, q := range []string{
		`DROP TABLE IF EXISTS ` + table,
		`CREATE TABLE ` + table + ` (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id))`,
		`INSERT INTO ` + table + ` SELECT consumer, message_key::uuid, processed_at FROM processed_event ORDER BY processed_at`,
		`CREATE INDEX ON ` + table + ` (processed_at)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("uuid layout: %w", err)
		}
	}
	if err := settle(ctx, pool, table); err != nil {
		return 0, err
	}
	var size int64
	if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('`+table+`')`).Scan(&size); err != nil {
		return 0, fmt.Errorf("uuid layout: %w", err)
	}
	_, err := pool.Exec(ctx, `DROP TABLE `+table)
	return size, err
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
