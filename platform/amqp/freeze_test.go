package amqp

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	ossignal "os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"example.com/shop/platform/config"
)

// holderEnv makes the test binary run holdDeliveries instead of the tests;
// its value is the base name of the topology (namedTopology).
const holderEnv = "AMQP_TEST_HOLDER"

func TestMain(m *testing.M) {
	if base := os.Getenv(holderEnv); base != "" {
		if err := holdDeliveries(base); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// holdDeliveries consumes base's queue through a Connection with
// AMQP_HEARTBEAT (on AMQP_URL) and a Consumer whose handler prints
// "holding <message id>" and keeps the delivery until SIGTERM.
func holdDeliveries(base string) error {
	env := config.NewEnv(os.Getenv)
	url := env.String("AMQP_URL", "")
	heartbeat := HeartbeatFromEnv(env, "AMQP_HEARTBEAT")
	if err := env.Err(); err != nil {
		return err
	}
	ctx, stop := ossignal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	topo := namedTopology(base)
	conn, err := DialOptions(ctx, url, topo, nil, Options{Heartbeat: heartbeat})
	if err != nil {
		return err
	}
	defer conn.Close()
	q := topo.Queues[0]
	c, err := NewConsumer(conn, ConsumerConfig{Queue: q.Name, DeadLetterQueue: q.DeadLetterQueue, RetryDelays: q.RetryDelays,
		Workers: held, Prefetch: held}, func(ctx context.Context, d Delivery) error {
		fmt.Println("holding", d.MessageID)
		<-ctx.Done()
		return ctx.Err()
	}, nil, nil)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// held is how many deliveries the frozen consumer holds: its workers and
// prefetch.
const held = 4

// A consumer process frozen (SIGSTOP) with deliveries in hand gives them
// back: the broker hears nothing on its connection, closes it 2 to 3
// heartbeat timeouts after the last frame and requeues its deliveries, and
// another consumer gets them within 3 × Options.Heartbeat of the freeze.
func TestFrozenConsumersDeliveriesReachAnotherWithinThreeHeartbeats(t *testing.T) {
	t.Parallel()
	const heartbeat = 2 * time.Second
	base := uniqueName(t, "t")
	topo := namedTopology(base)
	t.Cleanup(func() { deleteTopology(t, topo) })
	publishAll(t, dialTest(t, topo), topo.Exchange, messages(held, "frozen"))

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+base, "AMQP_URL="+amqpURL(t), "AMQP_HEARTBEAT="+heartbeat.String())
	cmd.Stderr = t.Output()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // frozen or not
		_ = cmd.Wait()
	})
	holding := make(chan string)
	go func() {
		for lines := bufio.NewScanner(out); lines.Scan(); {
			if id, ok := strings.CutPrefix(lines.Text(), "holding "); ok {
				holding <- id
			}
		}
		close(holding)
	}()
	for range held {
		select {
		case _, ok := <-holding:
			if !ok {
				t.Fatal("the consumer process ended")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the consumer process did not take its deliveries")
		}
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	in, err := rawChannel(t).Consume(topo.Queues[0].Name, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The bound, and a margin for a loaded machine: the broker's look at
	// the connection and the redelivery take milliseconds.
	bound := 3 * heartbeat
	limit := time.After(bound + 2*time.Second)
	for got := 0; got < held; got++ {
		select {
		case d := <-in:
			if !d.Redelivered {
				t.Fatalf("%s was not redelivered", d.MessageId)
			}
		case <-limit:
			t.Fatalf("%d of the %d deliveries of a consumer frozen %v ago reached another consumer (heartbeat %v, bound %v)",
				got, held, time.Since(frozen).Round(time.Millisecond), heartbeat, bound)
		}
	}
	t.Logf("the frozen consumer's %d deliveries reached another consumer %v after the freeze (heartbeat %v, bound %v)",
		held, time.Since(frozen).Round(time.Millisecond), heartbeat, bound)
}
