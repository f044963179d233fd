package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"example.com/shop/platform/backoff"
)

// TestNewDoublesWithJitterUpToMax: each delay lies within ±50% of the nominal
// delay, which doubles from initial and stops at max; Reset starts again.
func TestNewDoublesWithJitterUpToMax(t *testing.T) {
	t.Parallel()
	b := backoff.New(100*time.Millisecond, time.Second)
	nominal := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for round := 0; round < 2; round++ {
		for i, n := range nominal {
			n *= time.Millisecond
			if d := b.NextBackOff(); d < n/2 || d > n*3/2 {
				t.Errorf("round %d, delay %d = %v, want within [%v, %v]", round, i, d, n/2, n*3/2)
			}
		}
		b.Reset()
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on an ended context = %v, want context.Canceled", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("Sleep took %v after its context ended", time.Since(start))
	}
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v", err)
	}
}
