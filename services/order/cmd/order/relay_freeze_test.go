package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/testkit"
	"example.com/shop/services/order/migrations"
)

// childRelayEnv makes the test binary run `order relay` instead of the
// tests, so a test can freeze a real relay process.
const childRelayEnv = "ORDER_TEST_CHILD_RELAY"

func TestMain(m *testing.M) {
	if os.Getenv(childRelayEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, []string{"order", "relay"}, os.Getenv, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// metricValue reads one unlabelled sample from a /metrics page; -1 while
// the page does not show it yet.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	_, body := httpGet(t, base+"/metrics")
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

func unpublished(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A leader frozen with SIGSTOP loses its lock once its lock session idles
// out (RELAY_LOCK_TIMEOUT, default 5 s): a standby takes over within 10 s.
// Woken with SIGCONT, the old leader finds its lock gone and steps down
// without publishing anything more.
func TestRelayStandbyTakesOverFromAFrozenLeader(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrations.FS)
	amqpURL := testkit.NewVhost(t)
	vars := map[string]string{
		"ORDER_DATABASE_URL":  dbURL,
		"AMQP_URL":            amqpURL,
		"HTTP_ADDR":           "127.0.0.1:0",
		"RELAY_POLL_INTERVAL": "50ms",
		"LOG_LEVEL":           "debug",
	}

	// The leader: a child process running `order relay` with the default
	// lock settings.
	leaderLogs := &relayLogs{addr: make(chan string, 1)}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRelayEnv+"=1")
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = leaderLogs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the leader process did not stop on SIGTERM:\n%s", leaderLogs)
		}
	})
	var leader string
	select {
	case addr := <-leaderLogs.addr:
		leader = "http://" + addr
	case err := <-exited:
		t.Fatalf("leader process ended: %v\n%s", err, leaderLogs)
	case <-time.After(60 * time.Second):
		t.Fatalf("leader process did not listen:\n%s", leaderLogs)
	}
	waitFor(t, "the child leads", 30*time.Second, func() bool { return metricValue(t, leader, "relay_leader") == 1 })
	insertOutboxRow(t, pool, time.Time{})
	waitFor(t, "the leader publishes", 30*time.Second, func() bool { return unpublished(t, pool) == 0 })

	// The standby, in this process.
	standby, standbyLogs, _ := startRelay(t, vars)
	waitFor(t, "the standby joins, leading nothing", 30*time.Second, func() bool {
		return strings.Contains(standbyLogs.String(), "outbox relay joined")
	})
	time.Sleep(300 * time.Millisecond) // a few rounds: the only partition stays with the leader
	if v := metricValue(t, standby, "relay_leader"); v != 0 {
		t.Fatalf("the standby leads (relay_leader %v) beside a live leader", v)
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, "the standby takes over from the frozen leader", 10*time.Second, func() bool {
		return metricValue(t, standby, "relay_leader") == 1
	})
	t.Logf("the standby led %v after the leader froze", took.Round(10*time.Millisecond))
	for range 20 {
		insertOutboxRow(t, pool, time.Time{})
	}
	waitFor(t, "the new leader publishes", 30*time.Second, func() bool { return unpublished(t, pool) == 0 })

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the woken leader steps down", 30*time.Second, func() bool {
		return metricValue(t, leader, "relay_leader") == 0
	})
	for range 20 {
		insertOutboxRow(t, pool, time.Time{})
	}
	waitFor(t, "the standby publishes the rest", 30*time.Second, func() bool { return unpublished(t, pool) == 0 })
	if v := metricValue(t, leader, "relay_published_total"); v != 1 {
		t.Fatalf("the woken leader published %v rows in all, want only the first", v)
	}
	if v := metricValue(t, standby, "relay_published_total"); v != 40 {
		t.Fatalf("the standby published %v rows, want 40", v)
	}
}
