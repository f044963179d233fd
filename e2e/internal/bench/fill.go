package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
)

// stockConsumer is the name bin/stock records its processed_event keys
// under (services/stock's events.Consumer).
const stockConsumer = "stock"

// placedBody returns the JSON envelope of a new order.order.placed.v1 event
// with one line, and its event id.
func placedBody(now time.Time) ([]byte, contracts.Envelope, error) {
	payload := contracts.OrderPlaced{
		OrderID:    uuid.New(),
		CustomerID: uuid.New(),
		Lines:      []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}},
		Version:    2,
	}
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, uuid.NewString(), payload, now)
	if err != nil {
		return nil, env, err
	}
	body, err := json.Marshal(env)
	if err != nil {
		return nil, env, err
	}
	return body, env, nil
}

// uuidV7SQL is a SQL expression for a UUID v7 whose timestamp is the
// timestamptz column "at": 48 bits of milliseconds, the version nibble 7,
// random bits, the variant bits 10 and more random bits.
const uuidV7SQL = `(lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0')
	|| '7' || substr(md5(random()::text), 1, 3)
	|| substr('89ab', 1 + floor(random() * 4)::int, 1)
	|| substr(md5(random()::text), 1, 15))::uuid`

// fillOutboxSQL inserts $2 valid order.order.placed.v1 rows, one
// millisecond apart from $1 on, published (at their occurred_at) when $3.
// The envelopes pass the contract's schema, like the order service's.
const fillOutboxSQL = `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
SELECT e.id, 'order.order.placed.v1', 'order.order.placed.v1',
	jsonb_build_object(
		'event_id', e.id::text,
		'event_name', 'order.order.placed.v1',
		'occurred_at', to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
		'producer', 'order',
		'schema_version', 1,
		'correlation_id', 'bench-' || e.g,
		'payload', jsonb_build_object(
			'order_id', gen_random_uuid()::text,
			'customer_id', gen_random_uuid()::text,
			'lines', jsonb_build_array(jsonb_build_object('product_id', gen_random_uuid()::text, 'quantity', '2.000')),
			'version', 2)),
	e.at,
	CASE WHEN $3::bool THEN e.at END
FROM (SELECT g, at, ` + uuidV7SQL + ` AS id
	FROM (SELECT g, $1::timestamptz + g * interval '1 millisecond' AS at
		FROM generate_series(1, $2::bigint) AS g) AS s) AS e`

// fillOutbox inserts n outbox rows with one INSERT ... SELECT
// generate_series, occurring one millisecond apart from base on; published
// rows look like rows the relay has already sent. It checks one stored
// envelope against the contract.
func fillOutbox(ctx context.Context, pool *pgxpool.Pool, base time.Time, n int, published bool) error {
	if n <= 0 {
		return nil
	}
	if _, err := pool.Exec(ctx, fillOutboxSQL, base, n, published); err != nil {
		return fmt.Errorf("fill outbox with %d rows: %w", n, err)
	}
	var body []byte
	if err := pool.QueryRow(ctx, `SELECT envelope::text FROM outbox WHERE occurred_at > $1 LIMIT 1`, base).Scan(&body); err != nil {
		return fmt.Errorf("read a filled outbox row: %w", err)
	}
	v, err := contracts.NewValidator()
	if err != nil {
		return err
	}
	if err := v.Validate(body); err != nil {
		return fmt.Errorf("filled outbox envelope is invalid: %w", err)
	}
	return nil
}

// fillProcessedEvents inserts n processed_event keys of the stock consumer:
// time-ordered (v7) event ids whose times are one millisecond apart from
// keysFrom on, processed one microsecond apart from processedFrom on.
func fillProcessedEvents(ctx context.Context, pool *pgxpool.Pool, keysFrom, processedFrom time.Time, n int) error {
	if n <= 0 {
		return nil
	}
	_, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, message_key, payload_sha256, processed_at)
SELECT $3, (`+uuidV7SQL+`)::text, sha256(g::text::bytea), processed
FROM (SELECT g, $4::timestamptz + g * interval '1 millisecond' AS at,
	$1::timestamptz + g * interval '1 microsecond' AS processed FROM generate_series(1, $2::bigint) AS g) AS s`,
		processedFrom, n, stockConsumer, keysFrom)
	if err != nil {
		return fmt.Errorf("fill processed_event with %d rows: %w", n, err)
	}
	return nil
}

// settle vacuums and analyses table and forces a checkpoint, so that a
// measurement after a big fill does not pay for the fill's autovacuum or
// checkpoint.
func settle(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

func count(ctx context.Context, pool *pgxpool.Pool, query string, args ...any) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", query, err)
	}
	return n, nil
}
