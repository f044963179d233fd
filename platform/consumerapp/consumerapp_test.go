package consumerapp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
	"example.com/shop/testkit"

	"github.com/jackc/pgx/v5"
)

var billing = consumerapp.Service{
	Name: "billing", EnvPrefix: "BILLING_",
	DatabaseURL: "postgres://postgres@localhost:5432/billing?sslmode=disable", HTTPAddr: ":8099",
	Workers: 3, InboxGroup: 1,
}

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestServeConfigNamesTheService: every service variable carries the prefix, the
// shared ones do not, in the order help lists them, with the service's defaults.
func TestServeConfigNamesTheService(t *testing.T) {
	env := config.NewEnv(getenv(nil))
	c := billing.LoadServeConfig(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range env.Vars() {
		names = append(names, v.Key)
	}
	want := []string{"BILLING_DATABASE_URL", "HTTP_ADDR", "LOG_LEVEL", "MIGRATE_ON_START", "AMQP_URL", "BILLING_WORKERS",
		"BILLING_INBOX_GROUP", "BILLING_INBOX_TX", "BILLING_MAX_ATTEMPTS", "BILLING_RETRY_DELAYS",
		"INBOX_MIN_RETENTION", "AMQP_REDECLARE_INTERVAL", "AMQP_HEARTBEAT", "BILLING_PREFETCH", "RELAY_USERS"}
	if !slices.Equal(names, want) {
		t.Errorf("variables read:\n%v\nwant\n%v", names, want)
	}
	if c.DatabaseURL != billing.DatabaseURL || c.HTTPAddr != ":8099" || c.Workers != 3 || c.Prefetch != 12 ||
		c.InboxGroup != 1 || c.InboxTx != 2 || c.MaxAttempts != 5 || c.MinRetention != 168*time.Hour ||
		c.RedeclareInterval != 5*time.Second || c.Heartbeat != 5*time.Second || c.PoolSize() != 7 || c.MigrateOnStart ||
		c.RelayUsers != nil {
		t.Errorf("defaults: %+v, pool %d", c, c.PoolSize())
	}

	_, err := config.Load(getenv(map[string]string{"BILLING_WORKERS": "0", "BILLING_RETRY_DELAYS": "1s,x", "AMQP_HEARTBEAT": "1500ms",
		"RELAY_USERS": "order=order-relay,billing=x"}), billing.LoadServeConfig)
	for _, name := range []string{"BILLING_WORKERS", "BILLING_RETRY_DELAYS", "AMQP_HEARTBEAT", "RELAY_USERS"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("bad %s: %v, want an error naming it", name, err)
		}
	}
}

// TestToolConfigs: migrate reads the database and the log level, purge-inbox adds
// the retention, dlq the broker.
func TestToolConfigs(t *testing.T) {
	for _, tc := range []struct {
		read func(*config.Env) consumerapp.ToolConfig
		want []string
	}{
		{billing.LoadMigrateConfig, []string{"BILLING_DATABASE_URL", "LOG_LEVEL"}},
		{billing.LoadPurgeConfig, []string{"BILLING_DATABASE_URL", "LOG_LEVEL", "INBOX_MIN_RETENTION"}},
		{billing.LoadDLQConfig, []string{"BILLING_DATABASE_URL", "LOG_LEVEL", "INBOX_MIN_RETENTION", "AMQP_URL", "RELAY_USERS"}},
	} {
		env := config.NewEnv(getenv(nil))
		tc.read(env)
		var names []string
		for _, v := range env.Vars() {
			names = append(names, v.Key)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("read %v, want %v", names, tc.want)
		}
	}
}

// TestPurgeInboxRefusesBeforeConnecting: a missing horizon is a usage error and one
// below INBOX_MIN_RETENTION an error naming it, both before any database is dialled
// (the URL points nowhere).
func TestPurgeInboxRefusesBeforeConnecting(t *testing.T) {
	env := getenv(map[string]string{"BILLING_DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"})
	prog := func(stdout *bytes.Buffer) cli.Program {
		return cli.Program{Name: "billing", Commands: []cli.Command{billing.PurgeInboxCommand(env, stdout)}}
	}
	var out bytes.Buffer
	err := prog(&out).Run(context.Background(), []string{"billing", "purge-inbox"}, &out)
	var ue *cli.UsageError
	if !errors.As(err, &ue) || ue.Help != "purge-inbox" {
		t.Errorf("no --older-than: %v, want a usage error", err)
	}
	err = prog(&out).Run(context.Background(), []string{"billing", "purge-inbox", "--older-than", "1h"}, &out)
	if err == nil || !strings.Contains(err.Error(), "shorter than INBOX_MIN_RETENTION") {
		t.Errorf("--older-than 1h: %v, want a refusal naming INBOX_MIN_RETENTION", err)
	}
}

// TestServeNeedsAContractConsumer: serve takes the service's queues from the
// contract and refuses, before dialling anything, a name the contract does not
// know; serve and dlq name the contract's queues.
func TestServeNeedsAContractConsumer(t *testing.T) {
	var stderr bytes.Buffer
	serve := billing.ServeCommand(getenv(map[string]string{"HTTP_ADDR": "127.0.0.1:0"}), &stderr, nil, nil)
	if err := serve.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "billing") {
		t.Errorf("serve of an unknown consumer: %v, want an error naming it", err)
	}
	known := billing
	known.Name = contracts.ConsumerStock
	if s := known.ServeCommand(getenv(nil), nil, nil, nil).Summary; !strings.HasSuffix(s, contracts.QueueStock) {
		t.Errorf("serve summary %q does not name %s", s, contracts.QueueStock)
	}
	if s := known.DLQCommand(getenv(nil), nil, nil).Summary; !strings.HasSuffix(s, contracts.QueueStockDLQ) {
		t.Errorf("dlq summary %q does not name %s", s, contracts.QueueStockDLQ)
	}
}

// TestServeRefusesAnEventWithoutAHandler: a consumer whose registry entry receives an
// event it registers no handler for stops once connected, naming the event, instead
// of dead-lettering every such event.
func TestServeRefusesAnEventWithoutAHandler(t *testing.T) {
	stock := billing
	stock.Name, stock.EnvPrefix = contracts.ConsumerStock, "STOCK_"
	stock.Schema = migrate.Schema{inbox.Migrations(inbox.Roles{App: "stock_app", Maintenance: "stock_maintenance"})}
	_, dbURL := testkit.NewDatabase(t, stock.Schema)
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "STOCK_DATABASE_URL": dbURL}
	only := func(ib *inbox.Inbox, _ *slog.Logger) {
		inbox.On(ib, contracts.EventOrderPlaced, func(context.Context, pgx.Tx, inbox.Meta, contracts.OrderPlaced) error { return nil })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := stock.ServeCommand(getenv(env), io.Discard, only, nil).Run(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), contracts.EventOrderCancelled) {
		t.Errorf("serve without a handler for %s: %v, want an error naming it", contracts.EventOrderCancelled, err)
	}
}
