package consumerapp

import (
	"fmt"
	"testing"
)

func TestWithPoolSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://db/ship":                  "postgres://db/ship?pool_max_conns=6",
		"postgresql://db/ship?sslmode=off":    "postgresql://db/ship?pool_max_conns=6&sslmode=off",
		"postgres://db/ship?pool_max_conns=3": "postgres://db/ship?pool_max_conns=3",
		"host=db dbname=ship":                 "host=db dbname=ship",
	} {
		if got := withPoolSize(in, 6); got != want {
			t.Errorf("withPoolSize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPoolSizeFollowsTheInboxTransactions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    Settings
		want int
	}{
		{Settings{Workers: 8, InboxGroup: 1, InboxTx: 2}, 12},    // one transaction per worker
		{Settings{Workers: 32, InboxGroup: 16, InboxTx: 2}, 6},   // InboxTx group transactions
		{Settings{Workers: 1, InboxGroup: 16, InboxTx: 2}, 5},    // never more than the workers
		{Settings{Workers: 32, InboxGroup: 16, InboxTx: 40}, 36}, // likewise
	} {
		if got := tc.s.poolSize(); got != tc.want {
			t.Errorf("poolSize(%+v) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

func TestParseDelays(t *testing.T) {
	t.Parallel()
	got, err := parseDelays("50ms, 2s,1m")
	if err != nil || fmt.Sprint(got) != "[50ms 2s 1m0s]" {
		t.Errorf("parseDelays = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1s,", "soon", "0s", "1.5ms", "-1s", "500us"} {
		if got, err := parseDelays(bad); err == nil {
			t.Errorf("parseDelays(%q) = %v, want an error", bad, got)
		}
	}
}
