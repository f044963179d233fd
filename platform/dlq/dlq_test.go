package dlq

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/migrate"
	"example.com/shop/testkit"
)

const testKey = "test.thing.happened.v1"

// testSchema is the inbox's processed_event and the dead_letter table, from their
// packages' own migrations, with the roles of this package's tests.
var testSchema = migrate.Schema{
	inbox.Migrations(inbox.Roles{App: "test_app", Maintenance: "test_maintenance"}),
	Migrations(Roles{App: "test_app", Maintenance: "test_maintenance"}),
}

// fixture is a database and a private topology (one queue with its dead-letter queue)
// on the shared broker, deleted when the test ends.
type fixture struct {
	pool  *pgxpool.Pool
	cfg   Config
	topo  amqp.Topology
	conn  *amqp.Connection
	inbox sync.Map // event ids the handler applied
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool, dbURL := testkit.NewDatabase(t, testSchema)
	s := testkit.UniqueName(t, "dlq")
	q := s + ".q"
	topo := amqp.Topology{
		Exchange: s + ".events", AlternateExchange: s + ".alternate", UnroutableQueue: s + ".unroutable",
		DeadLetterExchange: s + ".dlx",
		Queues: []amqp.QueueSpec{{Name: q, DeadLetterQueue: q + ".dlq", RoutingKeys: []string{testKey},
			RetryDelays: []time.Duration{20 * time.Millisecond}}},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := amqp.DialOptions(ctx, testkit.AMQPURL(t), topo, nil, amqp.Options{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		deleteTopology(t, topo)
	})
	return &fixture{pool: pool, topo: topo, conn: conn, cfg: Config{
		Consumer: "tester", Queue: q, DeadLetterQueue: q + ".dlq", DatabaseURL: dbURL,
		AMQPURL: testkit.AMQPURL(t), Horizon: 168 * time.Hour,
	}}
}

func deleteTopology(t *testing.T, topo amqp.Topology) {
	conn, err := amqp091.Dial(testkit.AMQPURL(t))
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, q := range topo.QueueNames() {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	for _, x := range topo.ExchangeNames() {
		_ = ch.ExchangeDelete(x, false, false)
	}
}

// consume runs a consumer that records dead letters with Record and fails every
// event while broken() is true; a failed event is retried once, then dead-lettered
// at attempt 2.
func (f *fixture) consume(t *testing.T, broken func() bool) {
	t.Helper()
	f.consumeWith(t, func(ctx context.Context, d amqp.Delivery) error {
		if broken() {
			return errors.New("reserve line 1: product is unknown")
		}
		id := Identify(d.Body, d.MessageID, d.Type)
		_, err := f.pool.Exec(ctx, `INSERT INTO processed_event (consumer, message_key) VALUES ('tester', $1) ON CONFLICT DO NOTHING`, id.EventID.String())
		if err == nil {
			f.inbox.Store(id.Key, d.Attempt)
		}
		return err
	})
}

// consumeWith runs handle on the fixture's queue, recording dead letters with Record:
// a failed event is retried once, then dead-lettered at attempt 2.
func (f *fixture) consumeWith(t *testing.T, handle func(ctx context.Context, d amqp.Delivery) error) {
	t.Helper()
	q := f.topo.Queues[0]
	c, err := amqp.NewConsumer(f.conn, amqp.ConsumerConfig{
		Queue: q.Name, Name: "tester", RetryDelays: q.RetryDelays, MaxAttempts: 2,
		DeadLetterQueue: q.DeadLetterQueue, OnDeadLetter: Recorder(f.pool, "tester"),
	}, handle, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
}

// deadLetter starts a consumer that fails every event, publishes one that
// occurred at occurred and waits until it is dead-lettered.
func (f *fixture) deadLetter(t *testing.T, occurred time.Time) (uuid.UUID, amqp.Message) {
	t.Helper()
	f.consume(t, func() bool { return true })
	id, m := event(occurred)
	f.publish(t, m)
	eventually(t, "the dead letter", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 1 })
	return id, m
}

// event is an envelope-shaped body with a fresh event_id.
func event(occurred time.Time) (uuid.UUID, amqp.Message) {
	id := uuid.Must(uuid.NewV7())
	body := fmt.Sprintf(`{"event_id":%q,"event_name":%q,"occurred_at":%q,"payload":{}}`,
		id, testKey, occurred.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	return id, amqp.Message{RoutingKey: testKey, MessageID: id.String(), Type: testKey, Body: []byte(body)}
}

func (f *fixture) publish(t *testing.T, msgs ...amqp.Message) {
	t.Helper()
	pub := amqp.NewPublisher(f.conn, f.topo.Exchange)
	defer pub.Close()
	if n, err := pub.PublishBatch(t.Context(), msgs, 10*time.Second); err != nil {
		t.Fatalf("publish: %d confirmed: %v", n, err)
	}
}

func (f *fixture) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Run(t.Context(), f.cfg, args, &out, io.Discard)
	return out.String(), err
}

func (f *fixture) depth(t *testing.T, queue string) int {
	t.Helper()
	conn, err := amqp091.Dial(testkit.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

func (f *fixture) resolution(t *testing.T, key string) string {
	t.Helper()
	var r *string
	err := f.pool.QueryRow(t.Context(), `SELECT resolution FROM dead_letter WHERE consumer = 'tester' AND message_key = $1`, key).Scan(&r)
	if err != nil {
		t.Fatalf("dead_letter row of %s: %v", key, err)
	}
	if r == nil {
		return "open"
	}
	return *r
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFindReadFixReplay walks the runbook: events fail and are dead-lettered with a
// dead_letter row each; list and show say why; replay --dry-run changes nothing;
// once the cause is fixed, replay puts one back with its attempt count reset and the
// consumer applies it; a duplicate is named as such; drop removes one; every row ends
// resolved and the dead-letter queue empty.
func TestFindReadFixReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var mu sync.Mutex
	broken := true
	f.consume(t, func() bool { mu.Lock(); defer mu.Unlock(); return broken })

	id1, m1 := event(time.Now())
	id2, m2 := event(time.Now())
	id3, m3 := event(time.Now())
	f.publish(t, m1, m2, m3)
	eventually(t, "3 dead letters", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 3 })

	out, err := f.run(t, "list", "--json")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var entries []Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) != 3 {
		t.Fatalf("list --json = %s (%v)", out, err)
	}
	for _, e := range entries {
		if e.EventID == nil || e.EventName != testKey || e.Attempts != 2 ||
			!strings.Contains(e.Reason, "product is unknown") || time.Since(e.DeadLetteredAt) > time.Minute {
			t.Errorf("entry %+v", e)
		}
	}
	if out, err := f.run(t, "list"); err != nil || !strings.Contains(out, id1.String()) || !strings.Contains(out, "3 dead letters open, 0 without a copy") {
		t.Errorf("list = %q, %v", out, err)
	}
	if n := f.depth(t, f.cfg.DeadLetterQueue); n != 3 {
		t.Fatalf("list left %d messages in the dead-letter queue, want 3", n)
	}

	out, err = f.run(t, "show", id2.String())
	if err != nil || !strings.Contains(out, `"reason": "reserve line 1: product is unknown"`) || !strings.Contains(out, `"event_id": "`+id2.String()) {
		t.Errorf("show = %s, %v", out, err)
	}

	out, err = f.run(t, "replay", "--dry-run", id1.String())
	if err != nil || !strings.Contains(out, "would replay") || !strings.Contains(out, "apply") {
		t.Errorf("replay --dry-run = %q, %v", out, err)
	}
	if n := f.depth(t, f.cfg.DeadLetterQueue); n != 3 || f.resolution(t, id1.String()) != "open" {
		t.Fatalf("dry run changed something: %d in the dead-letter queue", n)
	}

	mu.Lock()
	broken = false // the cause is fixed
	mu.Unlock()
	out, err = f.run(t, "replay", id1.String())
	if err != nil || !strings.Contains(out, "replayed") {
		t.Fatalf("replay = %q, %v", out, err)
	}
	eventually(t, "the replayed event applied", func() bool { _, ok := f.inbox.Load(id1.String()); return ok })
	if a, _ := f.inbox.Load(id1.String()); a != 1 {
		t.Errorf("replayed event handled at attempt %v, want 1 (count reset)", a)
	}
	if r := f.resolution(t, id1.String()); r != "replayed" {
		t.Errorf("resolution = %s, want replayed", r)
	}

	// The key of event 3 is present: a replay is a duplicate, said so, and harmless.
	if _, err := f.pool.Exec(t.Context(), `INSERT INTO processed_event (consumer, message_key) VALUES ('tester', $1)`, id3.String()); err != nil {
		t.Fatal(err)
	}
	if out, err := f.run(t, "drop", id2.String()); err != nil || !strings.Contains(out, "1 dropped") {
		t.Errorf("drop = %q, %v", out, err)
	}
	if r := f.resolution(t, id2.String()); r != "dropped" {
		t.Errorf("resolution = %s, want dropped", r)
	}
	out, err = f.run(t, "replay", "--all")
	if err != nil || !strings.Contains(out, id3.String()) || !strings.Contains(out, "duplicate") {
		t.Errorf("replay --all = %q, %v", out, err)
	}
	eventually(t, "the dead-letter queue empty", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 0 })
	var open int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM dead_letter WHERE resolved_at IS NULL`).Scan(&open); err != nil || open != 0 {
		t.Errorf("%d dead_letter rows open (%v), want 0", open, err)
	}
	if _, err := f.run(t, "drop", uuid.NewString()); err == nil || !strings.Contains(err.Error(), "not in") {
		t.Errorf("drop of an unknown id: %v", err)
	}
}

// TestReplayRefusesOlderThanTheHorizon: an event older than the inbox purge horizon
// may have lost its key, so it is refused (and kept) unless --force.
func TestReplayRefusesOlderThanTheHorizon(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, _ := f.deadLetter(t, time.Now().Add(-200*time.Hour))

	out, err := f.run(t, "replay", "--all")
	if err == nil || !strings.Contains(out, "refused") || !strings.Contains(out, VerdictExpired) {
		t.Fatalf("replay = %q, %v; want refused", out, err)
	}
	// A refused message goes back when the command's connection closes; a
	// quorum queue counts it again a moment later.
	eventually(t, "the refused message back in the dead-letter queue", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 1 })
	if r := f.resolution(t, id.String()); r != "open" {
		t.Fatalf("refused message resolved: %s", r)
	}
	out, err = f.run(t, "replay", "--force", id.String())
	if err != nil || !strings.HasPrefix(out, "replayed") {
		t.Fatalf("replay --force = %q, %v", out, err)
	}
	// It fails again (the consumer is still broken) and comes back with a new row.
	eventually(t, "the dead letter back", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 1 })
	var rows int
	_ = f.pool.QueryRow(t.Context(), `SELECT count(*) FROM dead_letter WHERE message_key = $1`, id.String()).Scan(&rows)
	if rows != 2 || f.resolution(t, id.String()) == "" {
		t.Errorf("%d rows for %s, want 2 (one replayed, one open)", rows, id)
	}
}

// TestReplayRefusesAConflict: an event whose event_id the consumer processed with
// another content would be dead-lettered again at once (a *inbox.ConflictError), so
// replay refuses it unless --force; with the same content it is a duplicate.
func TestReplayRefusesAConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, m := f.deadLetter(t, time.Now())

	other := sha256.Sum256([]byte("another content"))
	if _, err := f.pool.Exec(t.Context(), `INSERT INTO processed_event (consumer, message_key, payload_sha256) VALUES ('tester', $1, $2)`,
		id.String(), other[:]); err != nil {
		t.Fatal(err)
	}
	out, err := f.run(t, "replay", "--all")
	if err == nil || !strings.HasPrefix(out, "refused") || !strings.Contains(out, VerdictConflict) {
		t.Fatalf("replay = %q, %v; want refused as a conflict", out, err)
	}
	// A refused message goes back when the command's connection closes; a
	// quorum queue counts it again a moment later.
	eventually(t, "the refused message back in the dead-letter queue", func() bool { return f.depth(t, f.cfg.DeadLetterQueue) == 1 })
	if r := f.resolution(t, id.String()); r != "open" {
		t.Fatalf("refused message resolved: %s", r)
	}

	var env contracts.Envelope
	if err := json.Unmarshal(m.Body, &env); err != nil {
		t.Fatal(err)
	}
	same, err := inbox.ContentSum(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(t.Context(), `UPDATE processed_event SET payload_sha256 = $2 WHERE consumer = 'tester' AND message_key = $1`,
		id.String(), same); err != nil {
		t.Fatal(err)
	}
	out, err = f.run(t, "replay", "--dry-run", "--all")
	if err != nil || !strings.HasPrefix(out, "would replay") || !strings.Contains(out, VerdictDuplicate) {
		t.Fatalf("replay --dry-run = %q, %v; want a duplicate", out, err)
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		nil, {"list", "x"}, {"list", "--all"}, {"show"}, {"replay"}, {"replay", "--all", "x"},
		{"drop"}, {"drop", "--force", "x"}, {"purge"},
	} {
		err := Run(t.Context(), Config{Consumer: "stock"}, args, io.Discard, io.Discard)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || ue.Help != "dlq" || !strings.HasPrefix(err.Error(), "dlq") {
			t.Errorf("dlq %v = %v, want a usage error of dlq", args, err)
		}
	}
}

// TestSubcommandHelp: each subcommand's help lists its own flags only.
func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(t.Context(), Config{Consumer: "stock"}, []string{"list", "--help"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "usage: stock dlq list [flags]") || !strings.Contains(s, "--json") ||
		strings.Contains(s, "--all") || strings.Contains(s, "--dry-run") || strings.Contains(s, "Usage of") {
		t.Errorf("list --help = %q", s)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"--help"}, {"replay", "-h"}, {"help", "replay"}} {
		var out bytes.Buffer
		if err := Run(t.Context(), Config{}, args, &out, io.Discard); err != nil || !strings.Contains(out.String(), "replay") {
			t.Errorf("dlq %v = %q, %v", args, out.String(), err)
		}
	}
}

func TestIdentify(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7())
	got := Identify([]byte(`{"event_id":"`+id.String()+`","event_name":"a.b","occurred_at":"2026-01-02T03:04:05.000Z"}`), "m", "t")
	if got.Key != id.String() || got.EventID != id || got.EventName != "a.b" || got.OccurredAt.IsZero() {
		t.Errorf("envelope: %+v", got)
	}
	if got := Identify([]byte(`not json`), "msg-1", "t"); got.Key != "msg-1" || got.EventID != uuid.Nil || got.EventName != "t" {
		t.Errorf("message id: %+v", got)
	}
	// sha256 of "x"
	if got := Identify([]byte(`x`), "", ""); got.Key != "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881" {
		t.Errorf("body hash: %+v", got)
	}
}

// TestListOfNodesWithADeadFirst: with AMQP_URL a list of nodes whose first one
// refuses, the commands fall through to the next node, say which one they are on,
// read the dead-letter queue and replay; with every node dead the error names each.
func TestListOfNodesWithADeadFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, _ := f.deadLetter(t, time.Now())

	live := f.cfg.AMQPURL
	u, err := url.Parse(live)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = "127.0.0.1:1" // nothing listens on port 1
	dead := u.String()
	logger, logs := testkit.Logger(t)
	f.cfg.Logger = logger
	f.cfg.AMQPURL = dead + "," + live

	out, err := f.run(t, "list", "--json")
	var entries []Entry
	if err != nil || json.Unmarshal([]byte(out), &entries) != nil || len(entries) != 1 || !entries[0].InQueue {
		t.Fatalf("list --json = %s, %v; want the dead letter and its queue copy", out, err)
	}
	if !strings.Contains(logs.String(), `"msg":"amqp connected","node":"`+config.MaskURL(live)+`"`) {
		t.Errorf("no amqp connected line for %s in:\n%s", config.MaskURL(live), logs)
	}
	if out, err := f.run(t, "replay", "--force", id.String()); err != nil || !strings.HasPrefix(out, "replayed") {
		t.Fatalf("replay = %q, %v", out, err)
	}

	u.Host = "127.0.0.1:2"
	f.cfg.AMQPURL = dead + "," + u.String()
	_, err = f.run(t, "list")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "127.0.0.1:2") {
		t.Fatalf("list on dead nodes: %v, want an error naming both", err)
	}
}
