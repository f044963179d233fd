package testkit_test

import (
	"strings"
	"sync"
	"testing"

	"example.com/shop/testkit"
)

func TestLoggerCollectsConcurrentLines(t *testing.T) {
	t.Parallel()
	logger, logs := testkit.Logger(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { logger.Debug("line", "n", i) })
	}
	wg.Wait()
	if n := strings.Count(logs.String(), `"msg":"line"`); n != 8 {
		t.Errorf("logged %d lines, want 8:\n%s", n, logs)
	}
	if tail := logs.Tail(10); len(tail) != 13 || !strings.HasPrefix(tail, "...") {
		t.Errorf("Tail(10) = %q, want ... and the last 10 bytes", tail)
	}
}
