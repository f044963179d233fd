package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"example.com/shop/platform/amqp"
	"example.com/shop/services/order/migrations"
	"example.com/shop/testkit"
)

// A relay that gets SIGTERM while the broker blocks its connection (a
// memory alarm on a private node) exits within its bound,
// amqp.DefaultCloseTimeout, with exit status 0: the broker reads nothing,
// so the connection is not waited for. Nothing is lost: once the alarm
// clears, another relay publishes every row the stopped one had not marked,
// and every event reaches its queue.
//
// It does not run in parallel: booting the private node takes both cores
// for seconds, which would starve the timing-sensitive tests beside it
// (TestRelayFrozenMidBatchSendsNothingAfterTheNewLeaderTookOver freezes a
// relay in the middle of a batch).
func TestRelayExitsOnSIGTERMDuringAMemoryAlarm(t *testing.T) {
	node := testkit.StartRabbitNode(t)
	pool, dbURL := testkit.NewDatabase(t, migrations.Schema)
	vars := map[string]string{
		"ORDER_DATABASE_URL":  dbURL,
		"AMQP_URL":            node.URL,
		"HTTP_ADDR":           "127.0.0.1:0",
		"RELAY_POLL_INTERVAL": "50ms",
	}
	cmd, base, logs, exited := startChildRelay(t, vars)
	waitFor(t, "the child leads", 60*time.Second, func() bool { return metricValue(t, base, "relay_leader") == 1 })
	const before, during = 10, 50
	for range before {
		insertOutboxRow(t, pool, time.Time{})
	}
	waitFor(t, "the relay publishes before the alarm", 60*time.Second, func() bool { return unpublished(t, pool) == 0 })

	node.Alarm(t)
	for range during {
		insertOutboxRow(t, pool, time.Time{})
	}
	var ready string
	defer func() {
		if t.Failed() {
			t.Logf("last /readyz: %s\nlogs:\n%s", ready, logs)
		}
	}()
	waitFor(t, "/readyz reports the blocked connection", 60*time.Second, func() bool {
		code, body := httpGet(t, base+"/readyz")
		ready = body
		return code == http.StatusServiceUnavailable && strings.Contains(body, "rabbitmq")
	})
	// The first batch sent into the block has failed: the relay now
	// retries with backoff, as it would for as long as the alarm lasts.
	waitFor(t, "a failed publish recorded", 60*time.Second, func() bool {
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE attempts > 0`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The bound is DefaultCloseTimeout; the limit adds 2 s for a busy
	// machine. (Closing a blocked connection takes no handshake, so the
	// relay usually exits in well under a second.)
	limit := amqp.DefaultCloseTimeout + 2*time.Second
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("the relay has not exited a minute after SIGTERM:\n%s", logs)
	}
	took := time.Since(start)
	t.Logf("the relay exited %v after SIGTERM during the memory alarm", took.Round(time.Millisecond))
	if took > limit {
		t.Errorf("the relay exited %v after SIGTERM, want within %v (bound %v)", took.Round(time.Millisecond), limit, amqp.DefaultCloseTimeout)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d, want 0:\n%s", code, logs)
	}
	if n := unpublished(t, pool); n != during {
		t.Errorf("%d rows unpublished after the stop, want the %d written during the alarm", n, during)
	}

	node.ClearAlarm(t)
	startRelay(t, vars)
	waitFor(t, "another relay publishes the rest", 60*time.Second, func() bool { return unpublished(t, pool) == 0 })
	got := collectOrders(t, node.URL)
	waitFor(t, "every event in stock.events", 60*time.Second, func() bool {
		distinct, _, _ := got.check()
		return distinct == before+during
	})
}
