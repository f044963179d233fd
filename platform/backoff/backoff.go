// Package backoff is the platform's one policy for waiting between failed attempts:
// capped exponential delays with jitter (github.com/cenkalti/backoff/v4) and a sleep
// that ends with its context.
package backoff

import (
	"context"
	"time"

	cenkalti "github.com/cenkalti/backoff/v4"
)

// Jitter is the randomization factor of every delay: a nominal delay d is drawn
// uniformly from [d*(1-Jitter), d*(1+Jitter)], so that processes restarted together
// do not retry in step.
const Jitter = 0.5

// Backoff yields the delays between attempts: NextBackOff returns the next one, Reset
// starts again from the first. Not safe for concurrent use.
type Backoff = cenkalti.ExponentialBackOff

// New returns a backoff whose nominal delay starts at initial and doubles after each
// NextBackOff up to max; each delay returned is the nominal one with Jitter applied, so
// it lies in [initial/2, 3*max/2]. It never gives up (no maximum elapsed time); Reset
// starts again from initial after a success.
func New(initial, max time.Duration) *Backoff {
	return cenkalti.NewExponentialBackOff(
		cenkalti.WithInitialInterval(initial),
		cenkalti.WithMaxInterval(max),
		cenkalti.WithMultiplier(2),
		cenkalti.WithRandomizationFactor(Jitter),
		cenkalti.WithMaxElapsedTime(0),
	)
}

// Sleep waits for d. It returns nil after d, or ctx's error as soon as ctx ends; a
// d <= 0 returns at once (ctx's error if it has ended).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
