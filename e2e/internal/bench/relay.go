package bench

import (
	"context"
	"fmt"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/metrics"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
)

// measureRelay fills one outbox with RelayRows unpublished rows, clones it
// twice, and drains one copy with the relay in OneAtATime mode and the
// other in Pipelined mode (platform/outbox, default batch size), each on a
// fresh vhost with the default topology. The one-at-a-time run stops after
// OneAtATimeLimit; its rate counts the rows it published by then.
func (e *env) measureRelay(ctx context.Context) error {
	s := e.cfg.Sizes
	srcURL, err := e.cloneDatabase(ctx, tplOrder, "relay-src")
	if err != nil {
		return err
	}
	pool, err := pg.NewPool(ctx, srcURL)
	if err != nil {
		return err
	}
	err = fillOutbox(ctx, pool, time.Now().Add(-time.Hour), s.RelayRows, false)
	if err == nil {
		err = settle(ctx, pool, "outbox")
	}
	pool.Close()
	if err != nil {
		return err
	}

	for _, run := range []struct {
		name, mode string
		limit      time.Duration
	}{
		{"relay_one_at_a_time", "one-at-a-time", s.OneAtATimeLimit},
		{"relay_pipelined", "pipelined", 0},
	} {
		vhost := "relay-pipelined"
		if run.mode == "one-at-a-time" {
			vhost = "relay-one"
		}
		dbURL, err := e.createDatabase(ctx, e.dbName(run.name), e.dbName("relay-src"))
		if err != nil {
			return err
		}
		amqpURL, err := e.vhostURL(vhost)
		if err != nil {
			return err
		}
		rate, published, err := e.runRelay(ctx, dbURL, amqpURL, run.mode, run.limit)
		if err2 := emptyVhost(amqpURL); err2 != nil {
			e.progress("   %v", err2)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", run.name, err)
		}
		e.results.set(run.name, rate, fmt.Sprintf("%d of %d outbox rows published, %s mode", published, s.RelayRows, run.mode))
		e.progress("   %-28s %10.0f events/s (%d rows)", run.name, rate, published)
	}
	one, _ := e.results.get("relay_one_at_a_time")
	pipe, _ := e.results.get("relay_pipelined")
	if one > 0 {
		e.results.set("relay_pipelined_speedup", pipe/one, "relay_pipelined divided by relay_one_at_a_time")
	}
	return nil
}

// runRelay runs one relay (in this process) on the outbox at dbURL until
// every row is published or limit (when > 0) has passed, and returns the
// published rows per second and their number. The clock starts when the
// relay starts, so it includes taking the advisory lock and opening the
// channel.
func (e *env) runRelay(ctx context.Context, dbURL, amqpURL string, mode string, limit time.Duration) (float64, int, error) {
	pool, err := pg.NewPool(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	conn, err := amqp.Dial(ctx, amqpURL, amqp.DefaultTopology(), e.logger)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = conn.Close() }()
	newPublisher := func() outbox.Publisher {
		pub := amqp.NewPublisher(conn, contracts.Exchange)
		if mode == "one-at-a-time" {
			return oneAtATime{pub}
		}
		return pub
	}
	relay, err := outbox.NewRelay(pool, newPublisher, outbox.RelayConfig{}, e.logger, metrics.NewRegistry())
	if err != nil {
		return 0, 0, err
	}
	const unpublished = `SELECT count(*) FROM outbox WHERE published_at IS NULL`
	total, err := count(ctx, pool, unpublished)
	if err != nil {
		return 0, 0, err
	}

	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- relay.Run(rctx) }()

	// Generous: a relay slower than 50 rows/s is broken, not slow.
	deadline := start.Add(time.Duration(total/50+30) * time.Second)
	var elapsed time.Duration
	for {
		time.Sleep(20 * time.Millisecond)
		left, err := count(ctx, pool, unpublished)
		if err != nil {
			return 0, 0, err
		}
		now := time.Now()
		if left == 0 {
			elapsed = now.Sub(start)
			break
		}
		if limit > 0 && now.Sub(start) >= limit {
			break // elapsed is taken when the relay is told to stop
		}
		if now.After(deadline) {
			return 0, 0, fmt.Errorf("relay published %d of %d rows before the deadline", total-left, total)
		}
	}
	if elapsed == 0 {
		elapsed = time.Since(start)
	}
	stop()
	if err := <-done; err != nil {
		return 0, 0, err
	}
	// The relay marks what was confirmed before it stopped; count that.
	left, err := count(ctx, pool, unpublished)
	if err != nil {
		return 0, 0, err
	}
	published := total - left
	if published == 0 {
		return 0, 0, fmt.Errorf("relay published nothing in %s", elapsed)
	}
	return float64(published) / elapsed.Seconds(), published, nil
}

// oneAtATime publishes each message of a batch alone and waits for its
// confirm before the next: the slow baseline that the relay's pipelined
// batches replace. confirmTimeout bounds the whole batch; when it is spent
// the batch ends early without an error and the rest waits for the next.
type oneAtATime struct{ *amqp.Publisher }

func (o oneAtATime) PublishBatch(ctx context.Context, msgs []amqp.Message, confirmTimeout time.Duration) (int, error) {
	deadline := time.Now().Add(confirmTimeout)
	for i := range msgs {
		left := time.Until(deadline)
		if left <= 0 {
			return i, nil
		}
		if _, err := o.Publisher.PublishBatch(ctx, msgs[i:i+1], left); err != nil {
			return i, err
		}
	}
	return len(msgs), nil
}
