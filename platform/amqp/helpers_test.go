package amqp

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/testkit"
)

// amqpURL is the broker for tests (TEST_AMQP_URL or the local default).
func amqpURL(t testing.TB) string { return testkit.AMQPURL(t) }

// uniqueName returns prefix with a random suffix, so parallel tests never
// share an exchange or a queue.
func uniqueName(t testing.TB, prefix string) string { return testkit.UniqueName(t, prefix) }

const testKey = "test.thing.happened.v1"

// testTopology is a private topology with one queue bound to testKey and
// two short retry levels; it is deleted when the test ends.
func testTopology(t testing.TB, delays ...time.Duration) Topology {
	t.Helper()
	topo := namedTopology(uniqueName(t, "t"), delays...)
	t.Cleanup(func() { deleteTopology(t, topo) })
	return topo
}

// namedTopology is testTopology's topology, its names starting with s.
func namedTopology(s string, delays ...time.Duration) Topology {
	if len(delays) == 0 {
		delays = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}
	}
	q := s + ".q"
	return Topology{
		Exchange:           s + ".events",
		AlternateExchange:  s + ".alternate",
		UnroutableQueue:    s + ".unroutable",
		DeadLetterExchange: s + ".dlx",
		Queues: []QueueSpec{{
			Name: q, DeadLetterQueue: q + ".dlq", RoutingKeys: []string{testKey}, RetryDelays: delays,
		}},
	}
}

func deleteTopology(t testing.TB, topo Topology) {
	t.Helper()
	conn, err := amqp091.Dial(amqpURL(t))
	if err != nil {
		t.Errorf("cleanup dial: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("cleanup channel: %v", err)
		return
	}
	queues := topo.QueueNames()
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Errorf("cleanup delete queue %s: %v", q, err)
			return
		}
	}
	for _, x := range topo.ExchangeNames() {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			t.Errorf("cleanup delete exchange %s: %v", x, err)
			return
		}
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// dialTest connects with short backoffs and closes at cleanup.
func dialTest(t testing.TB, topo Topology) *Connection {
	t.Helper()
	return dialTestOptions(t, topo, Options{})
}

// dialTestOptions is dialTest with opts (backoffs and name set unless given).
func dialTestOptions(t testing.TB, topo Topology, opts Options) *Connection {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = 5*time.Millisecond, 100*time.Millisecond
	}
	if opts.Name == "" {
		opts.Name = t.Name()
	}
	conn, err := DialOptions(ctx, amqpURL(t), topo, testLogger(t), opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// rawChannel is a plain channel on its own connection, for inspecting queues.
func rawChannel(t testing.TB) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(amqpURL(t))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}

// getOne polls queue until a message arrives or the timeout passes.
func getOne(t testing.TB, ch *amqp091.Channel, queue string, timeout time.Duration) amqp091.Delivery {
	t.Helper()
	end := time.Now().Add(timeout)
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get %s: %v", queue, err)
		}
		if ok {
			return d
		}
		if time.Now().After(end) {
			t.Fatalf("no message in %s after %v", queue, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func messages(n int, prefix string) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		id := prefix + "-" + itoa(i)
		msgs[i] = Message{
			RoutingKey: testKey, MessageID: id, Type: testKey,
			Body:    []byte(`{"n":` + itoa(i) + `}`),
			Headers: amqp091.Table{"correlation_id": "c-" + id},
		}
	}
	return msgs
}

func itoa(i int) string { return strconv.Itoa(i) }

// dialRaw opens a plain connection to url, for inspecting a private node.
func dialRaw(url string) (*amqp091.Connection, error) { return amqp091.Dial(url) }
