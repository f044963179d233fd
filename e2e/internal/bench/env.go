package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/testkit/rabbitadmin"
)

// env is what one run owns on the servers: template databases migrated by
// the real binaries, the databases cloned from them, and one vhost per
// measurement.
type env struct {
	cfg     Config
	id      string // run id, part of every name
	logger  *slog.Logger
	results collector

	admin *rabbitadmin.Admin // makes and deletes the vhosts

	mu        sync.Mutex
	databases []string          // created, to drop at close
	vhosts    map[string]string // purpose -> vhost name
}

// Template databases, one per service, migrated once per run.
const (
	tplOrder    = "order"
	tplStock    = "stock"
	tplShipping = "shipping"
)

// vhostPurposes lists the vhosts a run uses; without the management API
// they are all created in one rabbitmqctl call (each call costs seconds) and
// deleted in one.
func vhostPurposes(s Sizes) []string {
	p := []string{"broker-1", "broker-n", "relay-one", "relay-traced", "consumer-default", "consumer-tuned", "consumer-defaults", "shipping-defaults", "consumer-traced", "latency-notify", "latency-poll"}
	for _, procs := range relayProcesses {
		for _, parts := range relayPartitions {
			p = append(p, relayVhost(parts, procs))
		}
	}
	for i := range s.GrowthRows {
		p = append(p, fmt.Sprintf("growth-relay-%d", i), fmt.Sprintf("growth-consumer-%d", i))
	}
	for i := range s.MaxRates {
		p = append(p, fmt.Sprintf("max-rate-%d", i))
	}
	return p
}

func newEnv(ctx context.Context, cfg Config) (*env, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	e := &env{cfg: cfg, id: hex.EncodeToString(b[:]), logger: cfg.Logger, vhosts: map[string]string{}}
	if e.logger == nil {
		e.logger = slog.New(slog.DiscardHandler)
	}
	for _, svc := range contracts.Services() {
		if _, err := exec.LookPath(filepath.Join(cfg.BinDir, svc.Name)); err != nil {
			return nil, fmt.Errorf("binary %s not found in %s: run `make build` first: %w", svc.Name, cfg.BinDir, err)
		}
	}
	if err := pingPostgres(ctx, cfg.DatabaseURL); err != nil {
		return nil, err
	}
	if err := pingBroker(cfg.AMQPURL); err != nil {
		return nil, err
	}
	admin, err := rabbitadmin.Detect(ctx, cfg.AMQPURL)
	if err != nil {
		return nil, err
	}
	e.admin = admin
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	e.progress("== setup: template databases and %d vhosts (run %s)", len(vhostPurposes(cfg.Sizes)), e.id)
	for _, svc := range contracts.Services() { // a template database for every service, migrated
		t := struct{ name, bin, envVar string }{svc.Name, svc.Name, svc.EnvPrefix() + "DATABASE_URL"}
		u, err := e.createDatabase(ctx, e.templateName(t.name), "")
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, t.bin), "migrate")
		cmd.Env = append(cmd.Environ(), t.envVar+"="+u, "LOG_LEVEL=warn")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s migrate: %w: %s", t.bin, err, out)
		}
	}
	names := make([]string, 0, len(vhostPurposes(cfg.Sizes)))
	for _, p := range vhostPurposes(cfg.Sizes) {
		name := "bench-" + e.id + "-" + p
		e.vhosts[p] = name
		names = append(names, name)
	}
	if err := e.admin.AddVhosts(ctx, names); err != nil {
		e.vhosts = map[string]string{}
		return nil, err
	}
	ok = true
	return e, nil
}

func (e *env) progress(format string, args ...any) {
	if e.cfg.Progress != nil {
		fmt.Fprintf(e.cfg.Progress, format+"\n", args...)
	}
}

func (e *env) templateName(service string) string { return "bench_" + e.id + "_tpl_" + service }

// close drops every database and vhost of the run, even when the run's
// context has ended.
func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.mu.Lock()
	dbs := e.databases
	e.databases = nil
	var vhosts []string
	for _, v := range e.vhosts {
		vhosts = append(vhosts, v)
	}
	e.vhosts = map[string]string{}
	e.mu.Unlock()
	for i := len(dbs) - 1; i >= 0; i-- {
		if err := e.dropDatabase(ctx, dbs[i]); err != nil {
			e.progress("cleanup: %v", err)
		}
	}
	if len(vhosts) > 0 {
		if err := e.admin.DeleteVhosts(ctx, vhosts); err != nil {
			e.progress("cleanup: %v", err)
		}
	}
}

// vhostURL returns the AMQP URL of the vhost of purpose p.
func (e *env) vhostURL(p string) (string, error) {
	e.mu.Lock()
	name, ok := e.vhosts[p]
	e.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("no vhost for %s", p)
	}
	return e.admin.VhostURL(name), nil
}

// cloneDatabase creates a fresh database from the template of service and
// returns its URL.
func (e *env) cloneDatabase(ctx context.Context, service, purpose string) (string, error) {
	return e.createDatabase(ctx, e.dbName(purpose), e.templateName(service))
}

// dbName returns the name of the run's database for purpose.
func (e *env) dbName(purpose string) string {
	return "bench_" + e.id + "_" + strings.ReplaceAll(purpose, "-", "_")
}

func (e *env) createDatabase(ctx context.Context, name, template string) (string, error) {
	admin, err := pgx.Connect(ctx, e.cfg.DatabaseURL)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		return "", fmt.Errorf("%s: %w", stmt, err)
	}
	e.mu.Lock()
	e.databases = append(e.databases, name)
	e.mu.Unlock()
	return withDatabase(e.cfg.DatabaseURL, name)
}

func (e *env) dropDatabase(ctx context.Context, name string) error {
	admin, err := pgx.Connect(ctx, e.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns the server URL u with its database set to name.
func withDatabase(u, name string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", fmt.Errorf("database URL must be a postgres:// URL")
	}
	parsed.Path = "/" + name
	return parsed.String(), nil
}

// withParam returns the URL u with the query parameter key set to value.
func withParam(u, key, value string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	q := parsed.Query()
	q.Set(key, value)
	parsed.RawQuery = q.Encode()
	return parsed.String(), nil
}

func pingPostgres(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("PostgreSQL does not answer: %w", err)
	}
	return conn.Close(ctx)
}

func pingBroker(u string) error {
	conn, err := amqp091.DialConfig(u, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("RabbitMQ does not answer: %w", err)
	}
	return conn.Close()
}

// emptyVhost deletes the queues of the shop's topology in the vhost at
// amqpURL, so that the messages a measurement left behind stop taking the
// broker's memory and disk before the next measurement. Missing queues are
// fine.
func emptyVhost(amqpURL string) error {
	conn, err := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("empty vhost: %w", err)
	}
	defer conn.Close()
	topo := shopTopology()
	queues := topo.QueueNames()
	for _, q := range topo.Queues { // the consumers' retry queues
		for _, d := range amqp.DefaultRetryDelays() {
			queues = append(queues, amqp.RetryQueueName(q.Name, d))
		}
	}
	var errs []error
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("empty vhost: %w", err)
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			var amqpErr *amqp091.Error
			if !errors.As(err, &amqpErr) || amqpErr.Code != amqp091.NotFound {
				errs = append(errs, fmt.Errorf("delete queue %s: %w", q, err))
			}
			continue
		}
		_ = ch.Close()
	}
	return errors.Join(errs...)
}

// placedMessages builds n valid order.order.placed.v1 messages with one
// line each, as the relay would publish them.
func placedMessages(n int) ([]amqp.Message, error) {
	v, err := contracts.NewValidator()
	if err != nil {
		return nil, err
	}
	msgs := make([]amqp.Message, n)
	now := time.Now()
	for i := range msgs {
		body, env, err := placedBody(now)
		if err != nil {
			return nil, err
		}
		id := env.EventID.String()
		order, _, err := orderOf(body)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			if err := v.Validate(body); err != nil {
				return nil, fmt.Errorf("bench envelope is invalid: %w", err)
			}
		}
		// The properties and CloudEvents headers the relay sends, so that the
		// broker parses and stores the same messages as in the relay runs.
		msgs[i] = amqp.Message{RoutingKey: contracts.EventOrderPlaced, MessageID: id, Type: contracts.EventOrderPlaced,
			CorrelationID: env.CorrelationID, Body: body, Timestamp: now, Headers: amqp091.Table{
				contracts.HeaderSpecVersion: contracts.CloudEventsSpecVersion,
				contracts.HeaderID:          id,
				contracts.HeaderSource:      contracts.CloudEventsSource(contracts.ProducerOrder),
				contracts.HeaderType:        contracts.EventOrderPlaced,
				contracts.HeaderTime:        contracts.CloudEventsTime(now),
				contracts.HeaderSubject:     order,
			}}
	}
	return msgs, nil
}

// shopTopology is the topology the relay declares: the event exchanges and every
// consumer queue of the contract with its dead-letter queue, no retry queue.
func shopTopology() amqp.Topology {
	var queues []amqp.QueueSpec
	for _, c := range contracts.Consumers() {
		queues = append(queues, amqp.ConsumerQueue(c, nil))
	}
	return amqp.EventTopology(queues...)
}
