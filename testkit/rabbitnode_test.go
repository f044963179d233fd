package testkit_test

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/testkit"
)

// TestRabbitNodeStopsAndStartsWithItsQueues: a private node accepts AMQP on its own
// port, refuses it while stopped, and keeps its durable queues across a restart.
func TestRabbitNodeStopsAndStartsWithItsQueues(t *testing.T) {
	t.Parallel()
	start := time.Now()
	node := testkit.StartRabbitNode(t)
	t.Logf("private node %s booted in %v", node.Name, time.Since(start).Round(time.Millisecond))

	conn, err := amqp091.Dial(node.URL)
	if err != nil {
		t.Fatalf("dial %s: %v", node.URL, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("kept", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()

	node.Stop(t)
	if c, err := amqp091.Dial(node.URL); err == nil {
		_ = c.Close()
		t.Fatal("dial succeeded while the node is stopped")
	}
	start = time.Now()
	node.Start(t)
	t.Logf("restarted in %v", time.Since(start).Round(time.Millisecond))
	conn, err = amqp091.Dial(node.URL)
	if err != nil {
		t.Fatalf("dial after restart: %v", err)
	}
	defer conn.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("kept", true, false, false, false, nil); err != nil {
		t.Fatalf("durable queue gone after restart: %v", err)
	}
}
