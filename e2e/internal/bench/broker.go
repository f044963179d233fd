package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
)

// measureBroker measures the raw broker limit: persistent, mandatory
// publishes of real envelopes to app.events, which routes each one to both
// quorum queues of the default topology, with a window of BrokerBatch
// unconfirmed messages per publisher. No database is involved. It runs once
// with one publisher and once with BrokerPublishers publishers (one
// connection each), each in a fresh vhost; the better rate is the ceiling.
func (e *env) measureBroker(ctx context.Context) error {
	s := e.cfg.Sizes
	msgs, err := placedMessages(s.BrokerMessages)
	if err != nil {
		return err
	}
	best := 0.0
	for _, run := range []struct {
		name, vhost string
		publishers  int
	}{
		{"broker_1_publisher", "broker-1", 1},
		{brokerMultiName(s), "broker-n", s.BrokerPublishers},
	} {
		u, err := e.vhostURL(run.vhost)
		if err != nil {
			return err
		}
		b0 := brokerCPU()
		rate, err := e.publishAll(ctx, u, msgs, run.publishers, s.BrokerBatch)
		brokerMs := float64(brokerCPU()-b0) / float64(time.Millisecond) / float64(len(msgs))
		if err2 := emptyVhost(u); err2 != nil {
			e.progress("   %v", err2)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", run.name, err)
		}
		e.results.set(run.name, rate, fmt.Sprintf("%d msgs, %d publisher(s), confirm window %d each; RabbitMQ CPU %.3f ms per message",
			len(msgs), run.publishers, s.BrokerBatch, brokerMs))
		e.results.set("cpu_ms_"+run.name, brokerMs, "RabbitMQ's CPU time per message of "+run.name+" (user + system, /proc)")
		e.progress("   %-28s %10.0f msgs/s; RabbitMQ %.3f ms CPU per message (%.2f cores)", run.name, rate, brokerMs, brokerMs*rate/1000)
		if rate > best {
			best = rate
			e.results.set(cpuBrokerName, brokerMs, "RabbitMQ's CPU time per message of the ceiling's run, "+run.name)
		}
	}
	e.results.set("broker_ceiling", best, "best of the broker runs")
	return nil
}

// publishAll publishes msgs split over n publishers, each on its own
// connection and one stream, with at most window messages unconfirmed at a
// time (it sends half a window, then waits for the half before), the way
// the relay streams its batches, and returns the confirmed messages per
// second.
func (e *env) publishAll(ctx context.Context, amqpURL string, msgs []amqp.Message, n, window int) (float64, error) {
	conns := make([]*amqp.Connection, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	pubs := make([]*amqp.Publisher, n)
	for i := range conns {
		c, err := amqp.Dial(ctx, amqpURL, shopTopology(), e.logger)
		if err != nil {
			return 0, err
		}
		conns[i] = c
		pubs[i] = amqp.NewPublisher(c, contracts.Exchange)
		// Open the channel before the clock starts.
		if _, err := pubs[i].PublishBatch(ctx, msgs[i:i+1], 10*time.Second); err != nil {
			return 0, fmt.Errorf("warm-up publish: %w", err)
		}
	}
	per := (len(msgs) + n - 1) / n
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := time.Now()
	for i, p := range pubs {
		part := msgs[min(i*per, len(msgs)):min((i+1)*per, len(msgs))]
		wg.Go(func() {
			s := p.Stream(ctx, 5*time.Minute)
			defer s.Close()
			half := max(window/2, 1)
			for off := 0; off < len(part); off += half {
				s.Send(part[off:min(off+half, len(part))])
				if _, err := s.Wait(off); err != nil {
					errs[i] = err
					return
				}
			}
			if _, err := s.Wait(len(part)); err != nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(len(msgs)) / elapsed.Seconds(), nil
}
