package outbox

import (
	"strings"
	"testing"
	"time"

	"example.com/shop/contracts"
)

func TestPurgeDeletesOnlyOldPublishedRows(t *testing.T) {
	t.Parallel()
	pool := newOutboxDB(t)
	ctx := t.Context()
	oldPublished := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "old-published")
	recentPublished := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "recent-published")
	oldUnpublished := insertEvent(t, ctx, pool, contracts.EventOrderPlaced, "old-unpublished")
	for id, sql := range map[string]string{
		oldPublished:    `UPDATE outbox SET occurred_at = now() - interval '30 days', published_at = now() - interval '29 days' WHERE id = $1`,
		recentPublished: `UPDATE outbox SET occurred_at = now() - interval '2 days', published_at = now() - interval '1 day' WHERE id = $1`,
		oldUnpublished:  `UPDATE outbox SET occurred_at = now() - interval '90 days', attempts = 40 WHERE id = $1`,
	} {
		if _, err := pool.Exec(ctx, sql, id); err != nil {
			t.Fatal(err)
		}
	}
	// More old published rows than one chunk holds.
	const bulk = 2*purgeChunk + 7
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (id, event_name, routing_key, envelope, occurred_at, published_at)
		SELECT gen_random_uuid(), 'e', 'e', '{}', now() - interval '10 days', now() - interval '10 days'
		FROM generate_series(1, $1)`, bulk); err != nil {
		t.Fatal(err)
	}

	n, err := Purge(ctx, pool, 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n != bulk+1 {
		t.Fatalf("purged %d rows, want %d", n, bulk+1)
	}
	state := readOutbox(t, pool)
	if len(state) != 2 {
		t.Fatalf("%d rows left, want 2", len(state))
	}
	if _, ok := state[recentPublished]; !ok {
		t.Fatal("a row published within the horizon was purged")
	}
	if s, ok := state[oldUnpublished]; !ok || s.Published {
		t.Fatal("an unpublished row was purged")
	}

	if n, err := Purge(ctx, pool, 7*24*time.Hour); err != nil || n != 0 {
		t.Fatalf("second purge: %d, %v", n, err)
	}
}

func TestPurgeRefusesANonPositiveHorizon(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Hour} {
		if _, err := Purge(t.Context(), nil, d); err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Fatalf("Purge(%v): %v", d, err)
		}
	}
}
