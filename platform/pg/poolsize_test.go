package pg_test

import (
	"testing"

	"example.com/shop/platform/pg"
)

func TestWithPoolSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://db/ship":                  "postgres://db/ship?pool_max_conns=6",
		"postgresql://db/ship?sslmode=off":    "postgresql://db/ship?pool_max_conns=6&sslmode=off",
		"postgres://db/ship?pool_max_conns=3": "postgres://db/ship?pool_max_conns=3",
		"host=db dbname=ship":                 "host=db dbname=ship",
	} {
		if got := pg.WithPoolSize(in, 6); got != want {
			t.Errorf("WithPoolSize(%q) = %q, want %q", in, got, want)
		}
	}
}
