package outbox

import (
	"encoding/json"
	"testing"
)

// A vacuum leaves the relay's scan nothing to walk in a large outbox
// (migration 00002): the rows published since the last vacuum lose their
// entries in the index of unpublished rows even when they are a small share
// of the table, where PostgreSQL's default would skip cleaning the indexes
// and leave every later select walking them.
func TestVacuumLeavesTheRelaysScanNothingToWalk(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	ctx := t.Context()
	for _, sql := range []string{
		// A large table of rows published long ago, vacuumed.
		`INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
		 SELECT gen_random_uuid(), 'e', 'k', '{}', now() - interval '1 day' + g * interval '1 ms', now()
		 FROM generate_series(1, 100000) g`,
		`VACUUM outbox`,
		// The rows of the last few seconds, published since: under 2 % of its pages.
		`INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at)
		 SELECT gen_random_uuid(), 'e', 'k', '{}', now() + g * interval '1 ms' FROM generate_series(1, 2000) g`,
		`UPDATE outbox SET published_at = now() WHERE published_at IS NULL`,
		`VACUUM outbox`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var plan []struct{ Plan planNode }
	var raw []byte
	if err := pool.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+selectBatchSQL, 100, 1, 0).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	pages, found := plan[0].Plan.indexPages("outbox_unpublished_idx")
	if !found {
		t.Fatalf("the select does not use outbox_unpublished_idx:\n%s", raw)
	}
	// The root page of an empty index; 2,000 entries left would fill about 10.
	if pages > 1 {
		t.Errorf("the relay's select read %d pages of outbox_unpublished_idx after a vacuum, want 1:\n%s", pages, raw)
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON, BUFFERS).
type planNode struct {
	IndexName string     `json:"Index Name"`
	Hit       int        `json:"Shared Hit Blocks"`
	Read      int        `json:"Shared Read Blocks"`
	Plans     []planNode `json:"Plans"`
}

// indexPages returns the pages the scans of index under n read, and whether
// any scanned it.
func (n planNode) indexPages(index string) (int, bool) {
	if n.IndexName == index {
		return n.Hit + n.Read, true
	}
	for _, c := range n.Plans {
		if pages, ok := c.indexPages(index); ok {
			return pages, ok
		}
	}
	return 0, false
}
