package producerapp_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/outbox"
	"example.com/shop/platform/pg"
	"example.com/shop/platform/producerapp"
	"example.com/shop/testkit"
	"example.com/shop/testkit/servetest"
)

// stock is a second producer, mounted as a service's cmd would mount it.
var stock = producerapp.Service{
	Name: "stock", EnvPrefix: "STOCK_",
	DatabaseURL: "postgres://postgres@localhost:5432/stock?sslmode=disable", RelayHTTPAddr: ":8094",
}

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// varsOf lists the variables load reads, in the order help lists them.
func varsOf[C any](t *testing.T, load func(*config.Env) C) []string {
	t.Helper()
	env := config.NewEnv(getenv(nil))
	load(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range env.Vars() {
		names = append(names, v.Key)
	}
	return names
}

// TestCommandsNameTheService: the service's own variable carries its prefix,
// the shared ones do not, and the defaults are the service's.
func TestCommandsNameTheService(t *testing.T) {
	relay := []string{"STOCK_DATABASE_URL", "AMQP_URL", "AMQP_HEARTBEAT", "HTTP_ADDR", "LOG_LEVEL", "RELAY_DECLARE_QUEUES",
		"RELAY_PARTITIONS", "RELAY_BATCH_SIZE", "RELAY_POLL_INTERVAL", "RELAY_MAX_BACKOFF", "RELAY_CONFIRM_TIMEOUT",
		"RELAY_STALL_TIMEOUT", "RELAY_LOCK_RETRY", "RELAY_LOCK_TIMEOUT", "RELAY_LOCK_KEEPALIVE"}
	if got := varsOf(t, stock.LoadRelayConfig); !slices.Equal(got, relay) {
		t.Errorf("relay reads\n%v\nwant\n%v", got, relay)
	}
	if got, want := varsOf(t, stock.LoadPurgeConfig), []string{"STOCK_DATABASE_URL", "LOG_LEVEL", "OUTBOX_REPLAY_HORIZON"}; !slices.Equal(got, want) {
		t.Errorf("purge-outbox reads %v, want %v", got, want)
	}
	if got, want := varsOf(t, stock.LoadReplayConfig), []string{"STOCK_DATABASE_URL", "OUTBOX_REPLAY_HORIZON", "INBOX_MIN_RETENTION", "LOG_LEVEL"}; !slices.Equal(got, want) {
		t.Errorf("replay-outbox reads %v, want %v", got, want)
	}
	c, err := config.Load(getenv(nil), stock.LoadRelayConfig)
	if err != nil || c.DatabaseURL != stock.DatabaseURL || c.HTTPAddr != ":8094" || c.Relay.Partitions != outbox.DefaultPartitions {
		t.Errorf("relay defaults %+v, %v", c, err)
	}
	var names []string
	for _, cmd := range stock.Commands(getenv(nil), io.Discard, io.Discard) {
		names = append(names, cmd.Name)
	}
	if want := []string{"relay", "purge-outbox", "replay-outbox"}; !slices.Equal(names, want) {
		t.Errorf("commands %v, want %v", names, want)
	}
}

// program is a binary with only the producer's commands.
func program(vars map[string]string, stdout, stderr io.Writer) func(ctx context.Context, args ...string) error {
	return func(ctx context.Context, args ...string) error {
		return cli.Program{Name: stock.Name, Commands: stock.Commands(getenv(vars), stdout, stderr)}.
			Run(ctx, append([]string{stock.Name}, args...), stdout)
	}
}

// TestASecondProducerRelaysPurgesAndReplays runs the three commands of a
// service other than order on a database of its own: the relay publishes its
// row (its log lines name stock-relay), purge-outbox deletes it once
// published (and, with no IdempotencyConsumer, purges no keys), replay-outbox
// counts it.
func TestASecondProducerRelaysPurgesAndReplays(t *testing.T) {
	t.Parallel()
	pool, dbURL := testkit.NewDatabase(t, migrate.Schema{
		outbox.Migrations(outbox.Roles{Writer: "test_writer", Relay: "test_relay", Maintenance: "test_maintenance"}),
	})
	amqpURL := testkit.NewVhost(t)
	v, err := contracts.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter(v, "stock")
	orderID := uuid.New()
	var env contracts.Envelope
	if err := pg.WithTx(t.Context(), pool, func(tx pgx.Tx) error {
		env, err = w.Write(t.Context(), tx, contracts.EventStockReservationConfirmed, orderID.String(), "c", contracts.StockReservationConfirmed{
			OrderID: orderID, OrderVersion: 2, Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"STOCK_DATABASE_URL": dbURL, "AMQP_URL": amqpURL, "HTTP_ADDR": "127.0.0.1:0", "RELAY_POLL_INTERVAL": "50ms"}
	logs := &testkit.Logs{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- program(vars, io.Discard, logs)(ctx, "relay") }()

	d := servetest.Receive(t, amqpURL, contracts.QueueOrder)
	if d.MessageId != env.EventID.String() {
		t.Errorf("got message %s, want %s", d.MessageId, env.EventID)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var published bool
		if err := pool.QueryRow(t.Context(), `SELECT published_at IS NOT NULL FROM outbox`).Scan(&published); err == nil && published {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the row is not marked published:\n%s", logs)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v\n%s", err, logs)
	}
	if !strings.Contains(logs.String(), `"service":"stock-relay"`) {
		t.Errorf("the relay's log lines do not name stock-relay:\n%s", logs.Tail(5))
	}

	// replay-outbox counts the published row; purge-outbox deletes it.
	var out bytes.Buffer
	period := []string{"--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	if err := program(vars, &out, io.Discard)(t.Context(), append([]string{"replay-outbox", "--dry-run"}, period...)...); err != nil ||
		!strings.HasPrefix(out.String(), "would replay 1 published events") {
		t.Fatalf("replay-outbox --dry-run: %v, %q", err, out.String())
	}
	if _, err := pool.Exec(t.Context(), `UPDATE outbox SET published_at = now() - interval '200 hours'`); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := program(vars, &out, io.Discard)(t.Context(), "purge-outbox", "--older-than", "168h"); err != nil {
		t.Fatalf("purge-outbox: %v", err)
	}
	if got := out.String(); got != "purged 1 outbox rows published more than 168h0m0s ago\n" {
		t.Errorf("purge-outbox printed %q", got)
	}
}

// TestRelayTopologyDeclaresEveryConsumersQueue: with queues, the relay's
// topology names each consumer's queue, so an event published before a
// consumer first starts waits for it.
func TestRelayTopologyDeclaresEveryConsumersQueue(t *testing.T) {
	var queues []string
	for _, q := range producerapp.Topology(true).Queues {
		queues = append(queues, q.Name)
	}
	for _, c := range contracts.Consumers() {
		if !slices.Contains(queues, c.Queue) {
			t.Errorf("topology queues %v lack %s", queues, c.Queue)
		}
	}
	if got := producerapp.Topology(false).QueueNames(); len(got) > 0 {
		t.Errorf("without queues the topology declares %d queues, want none", len(got))
	}
}

// TestServeOfAProducerOnly: a service that consumes nothing mounts migrate and
// serve from producerapp. migrate creates its database; serve answers /readyz
// with PostgreSQL alone, no broker named, and its routes write the outbox.
func TestServeOfAProducerOnly(t *testing.T) {
	t.Parallel()
	feed := producerapp.Service{
		Name: "feed", EnvPrefix: "FEED_", HTTPAddr: ":8098",
		Schema: migrate.Schema{outbox.Migrations(outbox.Roles{Writer: "test_writer", Relay: "test_relay", Maintenance: "test_maintenance"})},
	}
	if got, want := varsOf(t, feed.LoadServeConfig), []string{"FEED_DATABASE_URL", "HTTP_ADDR", "LOG_LEVEL", "MIGRATE_ON_START"}; !slices.Equal(got, want) {
		t.Errorf("serve reads %v, want %v", got, want)
	}
	routes := func(pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []httpx.Check) http.Handler {
		r := httpx.NewRouter(logger, reg, checks...)
		r.Get("/outbox", func(w http.ResponseWriter, r *http.Request) {
			var n int
			if err := pool.QueryRow(r.Context(), `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		return r
	}
	run := func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
		return cli.Program{Name: feed.Name, Commands: []cli.Command{feed.ServeCommand(getenv, stderr, routes), feed.MigrateCommand(getenv, stderr)}}.
			Run(ctx, args, stdout)
	}
	vars := map[string]string{"FEED_DATABASE_URL": testkit.EmptyDatabaseURL(t)}
	servetest.Migrate(t, run, feed.Name, vars)
	srv := servetest.Start(t, run, feed.Name, vars)
	if status, body := servetest.Get(t, srv.URL+"/outbox"); status != http.StatusNoContent {
		t.Errorf("GET /outbox = %d %s, want 204", status, body)
	}
	srv.Stop(t)
}
