package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/amqp"
	"example.com/shop/platform/cli"
	"example.com/shop/platform/config"
	"example.com/shop/platform/pg"
)

// Config is what the dlq subcommands of one consuming service need.
type Config struct {
	// Consumer is the inbox consumer and dead_letter.consumer, e.g. "stock".
	Consumer string
	// Queue is the service's queue, where replay puts messages back.
	Queue string
	// DeadLetterQueue is the queue the commands read, e.g. "stock.events.dlq".
	DeadLetterQueue string
	// DatabaseURL is the service's database (the <service>_maintenance role in production).
	DatabaseURL string
	// AMQPURL is the broker (the service's own RabbitMQ user): one URL or the
	// comma-separated URLs of a cluster's nodes, tried in order (amqp.Nodes).
	AMQPURL string
	// Horizon is the shortest horizon purge-inbox accepts (INBOX_MIN_RETENTION): a
	// message whose event occurred longer ago may have lost its processed_event key, so
	// replay refuses it unless --force.
	Horizon time.Duration
	// ConfirmTimeout bounds each publish's wait for the broker's confirm (default 5 s).
	ConfirmTimeout time.Duration
	// Logger receives one line per dropped or replayed message, and "amqp
	// connected" with the broker node the command uses.
	Logger *slog.Logger
	// Check, when set, is the consumer's own check of a delivery (ContractCheck):
	// replay, --dry-run included, refuses without --force a message it fails, which
	// the consumer would dead-letter again at once, and says why.
	Check Check `json:"-"`
	// Vouch, when set, is the origin (amqp.Origin) the consumer accepts for an event
	// of this name (inbox.Publishers.Vouched): replay --force sends a message with it,
	// so an operator who has read a message can vouch for it (one dead-lettered for
	// its origin, such as a relay that ran as the wrong user, or one recorded before
	// origins were). Without it a message keeps its own origin.
	Vouch func(eventName string) amqp.Origin `json:"-"`
	// Stale, when set, is the service's own word on a valid event its inbox has not
	// seen: replay reports an event it calls stale as "stale: will change nothing"
	// (and replays it, closing the dead letter).
	Stale Stale `json:"-"`

	// Env, when set, reads the configuration the caller reads, so that each
	// subcommand's --help lists the environment variables with their defaults.
	Env func(env *config.Env) `json:"-"`

	// pause, for tests only, waits between a replayed message's confirm and the
	// commit of its resolution.
	pause time.Duration
}

// Usage is the command line of the dlq subcommands.
const Usage = `dlq list [--json] | dlq show ID | dlq replay [--dry-run] [--force] (--all | ID...) | dlq drop ID... | dlq undrop [--dry-run] ID...`

// Run runs one dlq subcommand, args being what follows "dlq" (flags before ids):
//
//	list [--json]                             every open dead letter, and every message of the
//	                                          dead-letter queue without one: event_id, event
//	                                          name, attempts, age, queue copy and reason (--json:
//	                                          an array of Entry)
//	show ID                                   one dead letter whole: properties, headers, body
//	replay [--dry-run] [--force] (--all|ID...) put messages back in the queue, x-attempt reset
//	drop ID...                                close dead letters without replaying them, for good
//	undrop [--dry-run] ID...                  reopen dropped dead letters
//
// An ID is a message key (the event_id of an event). The dead_letter record is the
// source of truth (docs/operations.md, "Dead letters"): replay publishes the message
// the record keeps, whether or not the dead-letter queue still holds its copy, and a
// missing copy is reported, not an error; the queue copy is used only for a record
// written without its message, or a message that has no record. Each ID is settled
// in one transaction that locks its open rows: the message is published with a
// confirm, the rows resolved, the transaction committed, then the copies in the
// dead-letter queue acknowledged. So each dead letter is replayed once, a command
// killed at any moment loses nothing (a message replayed but not yet resolved is
// replayed again later and skipped by the inbox as a duplicate), and a concurrent
// run that finds an ID taken by another (or already resolved) says so and counts it
// as done. Every other message of the dead-letter queue is read once and put back at
// its tail by a confirmed publish before its ack.
//
// A drop is final: in the transaction that closes the dead letter, it writes the
// event's processed_event key with outcome 'dropped', so that the consumer skips any
// later copy (the producer's replay-outbox, a redelivery, a replay) as a duplicate.
// undrop is the one way back: in one transaction it deletes that key (never a key the
// consumer processed itself, which it refuses) and reopens the dead letter. replay of
// a dropped ID refuses it, and with --force undrops and replays it in one transaction.
//
// It returns an error for bad arguments, an ID that is neither recorded nor in the
// queue, a refused replay, and a database or broker failure; a command line that
// cannot run is a *cli.UsageError (exit 2), and --help on a subcommand prints its own
// flags.
func Run(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	name := cfg.Consumer
	if name == "" {
		name = "dlq"
	} else {
		name += " dlq"
	}
	// do opens the connections and runs one subcommand.
	do := func(run func(s *session) error) error {
		s, err := open(ctx, cfg)
		if err != nil {
			return err
		}
		defer s.close()
		return run(s)
	}
	err := cli.Program{Name: name, Summary: "read, replay or drop dead letters", Commands: subcommands(cfg, stdout, do)}.
		Run(ctx, append([]string{name}, args...), stdout)
	var ue *cli.UsageError
	if errors.As(err, &ue) {
		// The binary's help for dlq lists the subcommands; each has --help of its own.
		sep := " "
		if ue.Help == "" {
			sep = ": "
		}
		return &cli.UsageError{Err: fmt.Errorf("dlq%s%w", sep, ue.Err), Help: "dlq"}
	}
	return err
}

// subcommands are Run's list, show, replay, drop and undrop, each run on a session by do
// and printing to stdout.
func subcommands(cfg Config, stdout io.Writer, do func(run func(s *session) error) error) []cli.Command {
	var asJSON, dryRun, force, all, undryRun bool
	return []cli.Command{{
		Name:    "list",
		Summary: "every open dead letter: event_id, event name, attempts, age, queue copy and reason",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print a JSON array of {event_id, event_name, attempts, reason, dead_lettered_at, message_key, recorded, in_queue}")
		},
		Env: cfg.Env,
		Run: func(ctx context.Context, _ []string) error {
			return do(func(s *session) error { return s.list(ctx, stdout, asJSON) })
		},
	}, {
		Name:    "show",
		Args:    "ID",
		Summary: "one dead letter whole: properties, headers, body",
		Env:     cfg.Env,
		Run: func(ctx context.Context, ids []string) error {
			if len(ids) != 1 {
				return cli.Usagef("show", "show takes one ID, got %d", len(ids))
			}
			return do(func(s *session) error { return s.show(ctx, stdout, ids[0]) })
		},
	}, {
		Name:    "replay",
		Args:    "(--all | ID...)",
		Summary: "put dead letters back in the service's queue from their record, x-attempt reset",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&dryRun, "dry-run", false, "say what would happen, change nothing")
			fs.BoolVar(&force, "force", false, "also messages older than the inbox purge horizon, without an event_id, or that the consumer would dead-letter again (sent as from their producer's relay: --force vouches for their origin), and a dropped ID (undropped first, in the same transaction)")
			fs.BoolVar(&all, "all", false, "every message")
		},
		Env: cfg.Env,
		Run: func(ctx context.Context, ids []string) error {
			if all == (len(ids) > 0) {
				return cli.Usagef("replay", "replay takes --all or IDs, not both nor neither")
			}
			return do(func(s *session) error { return s.replay(ctx, stdout, ids, dryRun, force) })
		},
	}, {
		Name:    "drop",
		Args:    "ID...",
		Summary: "close dead letters without replaying them, for good: a later copy is skipped as a duplicate",
		Env:     cfg.Env,
		Run: func(ctx context.Context, ids []string) error {
			if len(ids) == 0 {
				return cli.Usagef("drop", "drop takes one or more IDs")
			}
			return do(func(s *session) error { return s.drop(ctx, stdout, ids) })
		},
	}, {
		Name:    "undrop",
		Args:    "ID...",
		Summary: "reopen dropped dead letters: delete the dropped inbox key, the dead letter open again",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&undryRun, "dry-run", false, "say what would happen, change nothing")
		},
		Env: cfg.Env,
		Run: func(ctx context.Context, ids []string) error {
			if len(ids) == 0 {
				return cli.Usagef("undrop", "undrop takes one or more IDs")
			}
			return do(func(s *session) error { return s.undrop(ctx, stdout, ids, undryRun) })
		},
	}}
}

// session holds one command's connections.
type session struct {
	cfg     Config
	pool    *pgxpool.Pool
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	returns chan amqp091.Return
	stop    func() bool
}

func open(ctx context.Context, cfg Config) (*session, error) {
	pool, err := pg.NewPool(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("dlq: database %s: %w", config.MaskURL(cfg.DatabaseURL), err)
	}
	conn, err := dialBroker(ctx, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	// The broker calls below take no context; closing the connection ends them.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		stop()
		_ = conn.Close()
		pool.Close()
		return nil, fmt.Errorf("dlq: channel: %w", err)
	}
	return &session{cfg: cfg, pool: pool, conn: conn, ch: ch,
		returns: ch.NotifyReturn(make(chan amqp091.Return, 1)), stop: stop}, nil
}

// dialBroker opens the command's own connection to the first node of
// cfg.AMQPURL (one URL or a list of a cluster's nodes, amqp.Nodes) that
// accepts, each tried once in order for up to 10 s, all within 30 s and
// ctx, and logs "amqp connected" with the node. The error names every node
// tried and why it failed.
func dialBroker(ctx context.Context, cfg Config) (*amqp091.Connection, error) {
	nodes, err := amqp.ParseNodes(cfg.AMQPURL)
	if err != nil {
		return nil, fmt.Errorf("dlq: broker: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, node, err := nodes.Dial(ctx, 10*time.Second, amqp091.Config{
		Heartbeat:  5 * time.Second,
		Properties: amqp091.Table{"connection_name": cfg.Consumer + " dlq"},
	})
	if err != nil {
		return nil, fmt.Errorf("dlq: broker: %w", err)
	}
	cfg.Logger.Info("amqp connected", slog.String("node", node))
	return conn, nil
}

func (s *session) close() {
	s.stop()
	_ = s.conn.Close() // unacked messages go back to the dead-letter queue
	s.pool.Close()
}

// Entry is one line of `dlq list --json`.
type Entry struct {
	EventID        *string   `json:"event_id"`
	EventName      string    `json:"event_name"`
	Attempts       int       `json:"attempts"`
	Reason         string    `json:"reason"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	MessageKey     string    `json:"message_key"`
	// Recorded: an open dead_letter row holds it. A message in the queue without one
	// is a stale copy of a resolved dead letter, or was dead-lettered without a record.
	Recorded bool `json:"recorded"`
	// InQueue: the dead-letter queue holds a copy. An open record without one is
	// replayed from the record.
	InQueue bool `json:"in_queue"`
}

func entryOf(id Identity, reason string, attempts int, at time.Time) Entry {
	e := Entry{EventName: id.EventName, Attempts: attempts, Reason: reason, DeadLetteredAt: at.UTC(), MessageKey: id.Key}
	if id.EventID != uuid.Nil {
		s := id.EventID.String()
		e.EventID = &s
	}
	return e
}

func (s *session) list(ctx context.Context, stdout io.Writer, asJSON bool) error {
	recs, err := s.openRecords(ctx)
	if err != nil {
		return err
	}
	c, err := s.scan(ctx, nil)
	if err != nil {
		return err
	}
	entries := []Entry{}
	recorded := map[string]bool{}
	missing := 0
	for _, r := range recs {
		if recorded[r.key] {
			continue // the same key dead-lettered twice before a decision: one dead letter
		}
		recorded[r.key] = true
		e := entryOf(r.identity(), r.reason, r.attempts, r.at)
		e.Recorded, e.InQueue = true, len(c.byKey[r.key]) > 0
		if !e.InQueue {
			missing++
		}
		entries = append(entries, e)
	}
	unrecorded := 0
	for _, k := range c.keys {
		if recorded[k] {
			continue
		}
		m := c.byKey[k][0]
		e := entryOf(m.Identity, m.Reason, m.Attempts, m.DeadLetteredAt)
		e.InQueue = true
		entries = append(entries, e)
		unrecorded++
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT_ID\tEVENT_NAME\tATTEMPTS\tAGE\tQUEUE_COPY\tREASON")
	now := time.Now()
	for _, e := range entries {
		copyState := "yes"
		switch {
		case !e.Recorded:
			copyState = "no record"
		case !e.InQueue:
			copyState = "missing"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", e.MessageKey, orDash(e.EventName), e.Attempts,
			age(now, e.DeadLetteredAt), copyState, oneLine(e.Reason, 120))
	}
	fmt.Fprintf(tw, "%s open, %d without a copy in %s (replayed from the record); %s in %s without an open record\n",
		plural(len(recorded), "dead letter"), missing, s.cfg.DeadLetterQueue, plural(unrecorded, "message"), s.cfg.DeadLetterQueue)
	return tw.Flush()
}

func (s *session) show(ctx context.Context, stdout io.Writer, id string) error {
	key := keyOf(id)
	rec, recorded, err := s.latestRecord(ctx, key)
	if err != nil {
		return err
	}
	c, err := s.scan(ctx, nil)
	if err != nil {
		return err
	}
	inQueue := c.of(id)
	var m *Message
	if recorded {
		m = rec.message()
	}
	if m == nil && len(inQueue) > 0 {
		m = inQueue[0]
	}
	if m == nil && !recorded {
		return fmt.Errorf("dlq show: %s is not recorded and not in %s", id, s.cfg.DeadLetterQueue)
	}
	out := map[string]any{"message_key": key, "recorded": recorded, "in_queue": len(inQueue) > 0}
	if recorded {
		out["reason"], out["attempts"], out["dead_lettered_at"] = rec.reason, rec.attempts, rec.at.UTC()
		out["resolution"], out["resolved_at"] = rec.resolution, rec.resolvedAt
	}
	if m == nil {
		out["body"] = nil
		out["note"] = "the record was written without its message and the queue holds no copy"
	} else {
		d := m.Delivery
		out["message_key"], out["event_name"] = m.Key, m.EventName
		if !recorded {
			out["reason"], out["attempts"], out["dead_lettered_at"] = m.Reason, m.Attempts, m.DeadLetteredAt.UTC()
		}
		var body any = string(d.Body)
		if json.Valid(d.Body) {
			body = json.RawMessage(d.Body)
		}
		props := map[string]any{
			"message_id": d.MessageId, "type": d.Type, "content_type": d.ContentType,
			"correlation_id": d.CorrelationId, "timestamp": d.Timestamp.UTC(), "routing_key": d.RoutingKey,
		}
		if d.DeliveryMode != 0 {
			props["delivery_mode"] = d.DeliveryMode
		}
		out["properties"], out["headers"], out["body"] = props, headersOf(d.Headers), body
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}
