package consumerapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/config"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/platform/consumerapp/consumerapptest"
	"example.com/shop/platform/httpx"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/testkit"
)

// sampleSpec is a small consuming service: it records every order event it handles in
// the table seen and lists them at GET /seen/{order_id}. Its variables start with
// SAMPLE_.
func sampleSpec(t testing.TB) consumerapp.Spec {
	t.Helper()
	return consumerapp.Spec{
		Name: "sample",
		Queue: amqp.QueueSpec{
			Name:            "sample.events",
			DeadLetterQueue: "sample.events.dlq",
			RoutingKeys:     []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled},
		},
		Migrations:  sampleMigrations(t),
		DatabaseURL: "postgres://postgres@localhost:5432/sample?sslmode=disable",
		HTTPAddr:    ":8089",
		Register: func(ib *inbox.Inbox, _ *slog.Logger) {
			record := func(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
				var p struct {
					OrderID uuid.UUID `json:"order_id"`
				}
				if err := json.Unmarshal(env.Payload, &p); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO seen (event_id, order_id, event_name) VALUES ($1, $2, $3)`,
					env.EventID, p.OrderID, env.EventName)
				return err
			}
			ib.Register(contracts.EventOrderPlaced, record)
			ib.Register(contracts.EventOrderCancelled, record)
		},
		Routes: func(r chi.Router, pool *pgxpool.Pool, _ *slog.Logger) {
			r.Get("/seen/{order_id}", httpx.NewErrors(nil).Handle(func(w http.ResponseWriter, r *http.Request) error {
				orderID, err := httpx.PathUUID(r, "order_id")
				if err != nil {
					return err
				}
				rows, _ := pool.Query(r.Context(), `SELECT event_name FROM seen WHERE order_id = $1 ORDER BY event_name`, orderID)
				names, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return err
				}
				httpx.WriteJSON(w, http.StatusOK, names)
				return nil
			}))
		},
	}
}

// sampleMigrations are the processed_event migrations of package inbox's tests (their
// one copy) and testdata/00002_seen.sql.
func sampleMigrations(t testing.TB) fs.FS {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, path := range map[string]string{
		"00001_processed_event.sql":             "../inbox/testdata/migrations/00001_processed_event.sql",
		"00002_seen.sql":                        "testdata/00002_seen.sql",
		"00010_processed_event_message_key.sql": "../inbox/testdata/migrations/00010_processed_event_message_key.sql",
		"00003_dead_letter.sql":                 "../dlq/testdata/00003_dead_letter.sql",
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fsys[name] = &fstest.MapFile{Data: b}
	}
	return fsys
}

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func run(t testing.TB, spec consumerapp.Spec, vars map[string]string, stdout io.Writer, args ...string) error {
	t.Helper()
	return consumerapp.Run(testkit.Context(t), spec, append([]string{spec.Name}, args...), envOf(vars), stdout, io.Discard)
}

// TestServe migrates an empty database, runs serve on it and a fresh vhost, publishes
// a placed and a cancelled event and reads their effects over HTTP, with and without
// inbox group commit; consumerapptest.Start checks the clean shutdown.
func TestServe(t *testing.T) {
	t.Parallel()
	for _, group := range []string{"1", "4"} {
		t.Run("inbox_group="+group, func(t *testing.T) {
			t.Parallel()
			spec := sampleSpec(t)
			amqpURL := testkit.NewVhost(t)
			vars := map[string]string{
				"SAMPLE_DATABASE_URL": testkit.EmptyDatabaseURL(t),
				"AMQP_URL":            amqpURL,
				"SAMPLE_WORKERS":      "2",
				"SAMPLE_INBOX_GROUP":  group,
				"SAMPLE_RETRY_DELAYS": "50ms,100ms",
			}
			consumerapptest.Migrate(t, spec, vars)
			srv := consumerapptest.Start(t, spec, vars)

			placed, p := consumerapptest.Placed(t, "2.000")
			consumerapptest.Publish(t, amqpURL, placed)
			p.Version = 3
			cancelled, err := contracts.NewEnvelope(contracts.EventOrderCancelled, contracts.ProducerOrder, "corr", contracts.OrderCancelled(p), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			consumerapptest.Publish(t, amqpURL, cancelled)

			var seen []string
			deadline := time.Now().Add(60 * time.Second)
			for len(seen) < 2 && time.Now().Before(deadline) {
				consumerapptest.GetJSON(t, srv.URL+"/seen/"+p.OrderID.String(), http.StatusOK, &seen)
				time.Sleep(20 * time.Millisecond)
			}
			if want := []string{contracts.EventOrderCancelled, contracts.EventOrderPlaced}; fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Fatalf("seen = %v, want %v", seen, want)
			}

			status, metrics := consumerapptest.Get(t, srv.URL+"/metrics")
			for _, want := range []string{
				`inbox_processed_total{consumer="sample"} 2`,
				`amqp_consumer_processed_total{consumer="sample",queue="sample.events"} 2`,
				"http_requests_total", "go_goroutines",
			} {
				if status != http.StatusOK || !strings.Contains(metrics, want) {
					t.Errorf("/metrics (%d) lacks %s", status, want)
				}
			}
			srv.Stop(t)
			for _, want := range []string{`"service":"sample"`, `"inbox_group":` + group, `"retry_delays_ms":[50,100]`} {
				if !strings.Contains(srv.Logs.String(), want) {
					t.Errorf("serve's logs lack %s", want)
				}
			}
		})
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	spec := sampleSpec(t)
	vars := map[string]string{"SAMPLE_DATABASE_URL": testkit.EmptyDatabaseURL(t)}
	// migrate logs JSON as sample-migrate: each migration applied, then the outcome.
	got := consumerapptest.Migrate(t, spec, vars)
	for _, want := range []string{`"service":"sample-migrate"`, `"msg":"migration applied","service":"sample-migrate","version":1,`,
		`"version":2,`, `"msg":"database is up to date","service":"sample-migrate","database":`, `"applied":4}`} {
		if !strings.Contains(got, want) {
			t.Errorf("first migrate logged %s, want %s", got, want)
		}
	}
	if got := consumerapptest.Migrate(t, spec, vars); !strings.Contains(got, `"applied":0}`) {
		t.Errorf("second migrate logged %s", got)
	}

	vars["SAMPLE_DATABASE_URL"] = "postgres://postgres:secret@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"
	err := run(t, spec, vars, io.Discard, "migrate")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("migrate on a closed port: err = %v, want one without the password", err)
	}
}

func TestPurgeInbox(t *testing.T) {
	t.Parallel()
	spec := sampleSpec(t)
	pool, dbURL := testkit.NewDatabase(t, spec.Migrations)
	ctx := testkit.Context(t)
	// Two old keys and one recent key of sample, one old key of another consumer.
	_, err := pool.Exec(ctx, `INSERT INTO processed_event (consumer, message_key, processed_at) VALUES
		('sample', $1, now() - interval '300 hours'),
		('sample', $2, now() - interval '200 hours'),
		('sample', $3, now() - interval '1 hour'),
		('other', $4, now() - interval '300 hours')`,
		uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"SAMPLE_DATABASE_URL": dbURL}

	var out bytes.Buffer
	if err := run(t, spec, vars, &out, "purge-inbox", "--older-than", "170h"); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if !strings.HasPrefix(out.String(), "purged 2 processed_event keys") {
		t.Errorf("purge said %q", out.String())
	}
	rows, _ := pool.Query(ctx, `SELECT consumer FROM processed_event ORDER BY consumer`)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(left, ",") != "other,sample" {
		t.Errorf("left keys of %v (%v), want other,sample", left, err)
	}

	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"below the default minimum retention", []string{"--older-than", "1h"}, nil, "shorter than INBOX_MIN_RETENTION (168h0m0s)"},
		{"below the minimum retention", []string{"--older-than", "100h"}, nil, "shorter than INBOX_MIN_RETENTION"},
		{"below a configured minimum retention", []string{"--older-than", "47h"}, map[string]string{"INBOX_MIN_RETENTION": "48h"}, "shorter than INBOX_MIN_RETENTION (48h0m0s)"},
		{"no horizon", nil, nil, "--older-than DURATION is required"},
		{"negative horizon", []string{"--older-than", "-200h"}, nil, "--older-than DURATION is required"},
		{"bad horizon", []string{"--older-than", "soon"}, nil, "invalid value"},
		{"extra argument", []string{"--older-than", "200h", "now"}, nil, "unexpected argument"},
		{"bad minimum retention", []string{"--older-than", "200h"}, map[string]string{"INBOX_MIN_RETENTION": "soon"}, "INBOX_MIN_RETENTION"},
		{"negative minimum retention", []string{"--older-than", "200h"}, map[string]string{"INBOX_MIN_RETENTION": "-1h"}, "INBOX_MIN_RETENTION"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kv := map[string]string{"SAMPLE_DATABASE_URL": dbURL}
			for k, v := range tt.env {
				kv[k] = v
			}
			err := run(t, spec, kv, io.Discard, append([]string{"purge-inbox"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}

	// A lower minimum retention allows a shorter horizon.
	out.Reset()
	vars["INBOX_MIN_RETENTION"] = "30m"
	if err := run(t, spec, vars, &out, "purge-inbox", "--older-than", "45m"); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if !strings.HasPrefix(out.String(), "purged 1 processed_event keys") {
		t.Errorf("purge said %q", out.String())
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	spec := sampleSpec(t)
	for _, args := range [][]string{{"sample"}, {"sample", "ship-it"}} {
		err := consumerapp.Run(context.Background(), spec, args, envOf(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "usage: sample serve | migrate | purge-inbox") {
			t.Errorf("run %v: err = %v, want the usage", args, err)
		}
	}
}

func TestIncompleteSpecIsRefused(t *testing.T) {
	t.Parallel()
	err := consumerapp.Run(context.Background(), consumerapp.Spec{Name: "Bad-Name"}, []string{"x", "serve"}, envOf(nil), io.Discard, io.Discard)
	for _, want := range []string{"Bad-Name", "Queue", "Migrations", "DatabaseURL", "Register"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %s", err, want)
		}
	}
}

func TestLoadSettings(t *testing.T) {
	t.Parallel()
	spec := sampleSpec(t)
	s, err := consumerapp.LoadSettings(spec, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.DatabaseURL != spec.DatabaseURL || s.AMQPURL != config.DefaultAMQPURL || s.HTTPAddr != ":8089" ||
		s.LogLevel != slog.LevelInfo || s.Workers != 8 || s.Prefetch != 32 || s.InboxGroup != 1 || s.InboxTx != 2 ||
		s.MaxAttempts != 5 || fmt.Sprint(s.RetryDelays) != "[1s 5s 30s]" || s.MinRetention != 168*time.Hour {
		t.Errorf("defaults = %+v", s)
	}

	spec.Defaults = consumerapp.Defaults{Workers: 32, InboxGroup: 16, InboxTx: 3}
	s, err = consumerapp.LoadSettings(spec, envOf(nil))
	if err != nil || s.Workers != 32 || s.Prefetch != 128 || s.InboxGroup != 16 || s.InboxTx != 3 {
		t.Errorf("spec defaults: %+v, %v", s, err)
	}

	s, err = consumerapp.LoadSettings(spec, envOf(map[string]string{
		"SAMPLE_DATABASE_URL": "postgres://db/x", "AMQP_URL": "amqp://mq/", "HTTP_ADDR": ":1",
		"LOG_LEVEL": "debug", "SAMPLE_WORKERS": "2", "SAMPLE_INBOX_GROUP": "1", "SAMPLE_INBOX_TX": "5",
		"SAMPLE_RETRY_DELAYS": "50ms, 2s", "SAMPLE_MAX_ATTEMPTS": "3", "INBOX_MIN_RETENTION": "1h",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.DatabaseURL != "postgres://db/x" || s.AMQPURL != "amqp://mq/" || s.HTTPAddr != ":1" ||
		s.LogLevel != slog.LevelDebug || s.Workers != 2 || s.Prefetch != 8 || s.InboxGroup != 1 || s.InboxTx != 5 ||
		s.MaxAttempts != 3 || fmt.Sprint(s.RetryDelays) != "[50ms 2s]" || s.MinRetention != time.Hour {
		t.Errorf("settings = %+v", s)
	}

	_, err = consumerapp.LoadSettings(spec, envOf(map[string]string{
		"SAMPLE_WORKERS":      "many",
		"SAMPLE_PREFETCH":     "0",
		"SAMPLE_INBOX_GROUP":  "-2",
		"SAMPLE_INBOX_TX":     "x",
		"SAMPLE_MAX_ATTEMPTS": "-1",
		"SAMPLE_RETRY_DELAYS": "1s,1.5ms",
		"LOG_LEVEL":           "loud",
		"INBOX_MIN_RETENTION": "0s",
	}))
	var ve *config.VarError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a *config.VarError", err)
	}
	for _, key := range []string{"SAMPLE_WORKERS", "SAMPLE_PREFETCH", "SAMPLE_INBOX_GROUP", "SAMPLE_INBOX_TX",
		"SAMPLE_MAX_ATTEMPTS", "SAMPLE_RETRY_DELAYS", "LOG_LEVEL", "INBOX_MIN_RETENTION"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("err = %v, does not name %s", err, key)
		}
	}
}

// TestBadSettingsAreNamed: every subcommand refuses to start on a bad variable and
// names it.
func TestBadSettingsAreNamed(t *testing.T) {
	t.Parallel()
	spec := sampleSpec(t)
	for _, cmd := range []string{"serve", "migrate", "purge-inbox"} {
		err := run(t, spec, map[string]string{"SAMPLE_WORKERS": "many", "SAMPLE_RETRY_DELAYS": "1s,0.5ms"}, io.Discard, cmd)
		for _, want := range []string{"SAMPLE_WORKERS", "SAMPLE_RETRY_DELAYS"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: err = %v, want it to name %s", cmd, err, want)
			}
		}
	}
}

func TestTopologyHasOnlyTheServiceQueue(t *testing.T) {
	t.Parallel()
	spec := sampleSpec(t)
	delays := []time.Duration{50 * time.Millisecond, time.Second}
	topo := consumerapp.Topology(spec.Queue, delays)
	def := amqp.DefaultTopology()
	if topo.Exchange != def.Exchange || topo.AlternateExchange != def.AlternateExchange ||
		topo.UnroutableQueue != def.UnroutableQueue || topo.DeadLetterExchange != def.DeadLetterExchange {
		t.Errorf("exchanges = %+v, want those of amqp.DefaultTopology", topo)
	}
	if len(topo.Queues) != 1 {
		t.Fatalf("queues = %+v, want sample.events only", topo.Queues)
	}
	q := topo.Queues[0]
	if q.Name != "sample.events" || q.DeadLetterQueue != "sample.events.dlq" ||
		fmt.Sprint(q.RoutingKeys) != fmt.Sprint(spec.Queue.RoutingKeys) || fmt.Sprint(q.RetryDelays) != "[50ms 1s]" {
		t.Errorf("queue = %+v", q)
	}
	delays[0] = time.Hour
	if q.RetryDelays[0] != 50*time.Millisecond {
		t.Error("the topology shares the caller's delays")
	}
	if err := topo.Validate(); err != nil {
		t.Error(err)
	}
}

// TestServeWaitsForTheDatabase: with PostgreSQL and the broker unreachable serve
// answers /healthz, reports itself not ready, refuses the service's routes with 503,
// and stops cleanly when its context ends while it still waits.
func TestServeWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	spec := sampleSpec(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	vars := map[string]string{
		"SAMPLE_DATABASE_URL": "postgres://postgres:secret@127.0.0.1:1/sample?sslmode=disable",
		"AMQP_URL":            "amqp://guest:guest@127.0.0.1:1/",
		"HTTP_ADDR":           addr,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &testkit.Logs{}
	done := make(chan error, 1)
	go func() {
		done <- consumerapp.Run(ctx, spec, []string{"sample", "serve"}, envOf(vars), io.Discard, logs)
	}()
	base := "http://" + addr
	consumerapptest.GetJSON(t, base+"/healthz", http.StatusOK, nil)
	if status, body := consumerapptest.Get(t, base+"/readyz"); status != http.StatusServiceUnavailable || !strings.Contains(body, "postgres") {
		t.Errorf("GET /readyz = %d %s, want 503 naming postgres", status, body)
	}
	if status, body := consumerapptest.Get(t, base+"/seen/"+uuid.NewString()); status != http.StatusServiceUnavailable {
		t.Errorf("GET /seen/{id} = %d %s, want 503 while starting", status, body)
	}
	// The first failed attempt is logged before the stop, so the stop hits the wait.
	for end := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), `"level":"WARN","msg":"database not answering, retrying"`); {
		if time.Now().After(end) {
			t.Fatalf("no WARN line for the database:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10 s of cancel")
	}
	if l := logs.String(); strings.Contains(l, "secret") {
		t.Errorf("the logs show the database password:\n%s", l)
	}
}
