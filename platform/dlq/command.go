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
	// AMQPURL is the broker (the service's own RabbitMQ user).
	AMQPURL string
	// Horizon is the shortest horizon purge-inbox accepts (INBOX_MIN_RETENTION): a
	// message whose event occurred longer ago may have lost its processed_event key, so
	// replay refuses it unless --force.
	Horizon time.Duration
	// ConfirmTimeout bounds each publish's wait for the broker's confirm (default 5 s).
	ConfirmTimeout time.Duration
	// Logger receives one line per dropped or replayed message.
	Logger *slog.Logger
	// Check, when set, is the consumer's own check of a delivery (ContractCheck):
	// replay, --dry-run included, refuses without --force a message it fails, which
	// the consumer would dead-letter again at once, and says why.
	Check Check `json:"-"`

	// Env, when set, reads the configuration the caller reads, so that each
	// subcommand's --help lists the environment variables with their defaults.
	Env func(env *config.Env) `json:"-"`

	// pause, for tests only, waits between a replayed copy's confirm and the ack.
	pause time.Duration
}

// Usage is the command line of the dlq subcommands.
const Usage = `dlq list [--json] | dlq show ID | dlq replay [--dry-run] [--force] (--all | ID...) | dlq drop ID...`

// Run runs one dlq subcommand, args being what follows "dlq" (flags before ids):
//
//	list [--json]                             every message in the dead-letter queue: event_id,
//	                                          event name, attempts, age and reason (--json: an
//	                                          array of {event_id, event_name, attempts, reason,
//	                                          dead_lettered_at, message_key})
//	show ID                                   one message whole: properties, headers, body
//	replay [--dry-run] [--force] (--all|ID...) move messages back to the queue, x-attempt reset
//	drop ID...                                delete messages, logging each
//
// An ID is a message key (the event_id of an event). Every command reads the
// dead-letter queue by taking each message once and settling it by a confirmed
// publish (back to the tail of the dead-letter queue, or to the service's queue for
// replay) before its ack, so a message is never lost: a command killed at any moment
// leaves each message in the dead-letter queue, in the service's queue, or in both
// (the inbox then skips the second copy). replay and drop also resolve the message's
// dead_letter rows. It returns an error for bad arguments, an ID that was not found,
// a refused replay, and a database or broker failure; a command line that cannot run
// is a *cli.UsageError (exit 2), and --help on a subcommand prints its own flags.
func Run(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var asJSON, dryRun, force, all bool
	// do opens the connections and runs one subcommand.
	do := func(run func(s *session) error) error {
		s, err := open(ctx, cfg)
		if err != nil {
			return err
		}
		defer s.close()
		return run(s)
	}
	name := cfg.Consumer
	if name == "" {
		name = "dlq"
	} else {
		name += " dlq"
	}
	err := cli.Program{Name: name, Summary: "read, replay or drop the dead-letter queue", Commands: []cli.Command{{
		Name:    "list",
		Summary: "every message in the dead-letter queue: event_id, event name, attempts, age and reason",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print a JSON array of {event_id, event_name, attempts, reason, dead_lettered_at, message_key}")
		},
		Env: cfg.Env,
		Run: func(ctx context.Context, _ []string) error {
			return do(func(s *session) error { return s.list(ctx, stdout, asJSON) })
		},
	}, {
		Name:    "show",
		Args:    "ID",
		Summary: "one message whole: properties, headers, body",
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
		Summary: "move messages back to the service's queue, x-attempt reset",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&dryRun, "dry-run", false, "say what would happen, change nothing")
			fs.BoolVar(&force, "force", false, "also messages older than the inbox purge horizon, without an event_id, or that the consumer would dead-letter again")
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
		Summary: "delete messages, logging each",
		Env:     cfg.Env,
		Run: func(ctx context.Context, ids []string) error {
			if len(ids) == 0 {
				return cli.Usagef("drop", "drop takes one or more IDs")
			}
			return do(func(s *session) error { return s.drop(ctx, stdout, ids) })
		},
	}}}.Run(ctx, append([]string{name}, args...), stdout)
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
	conn, err := amqp091.DialConfig(cfg.AMQPURL, amqp091.Config{
		Dial: amqp091.DefaultDial(10 * time.Second), Heartbeat: 5 * time.Second,
		Properties: amqp091.Table{"connection_name": cfg.Consumer + " dlq"},
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("dlq: broker %s: %w", config.MaskURL(cfg.AMQPURL), err)
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

func (s *session) close() {
	s.stop()
	_ = s.conn.Close() // unacked messages go back to the dead-letter queue
	s.pool.Close()
}

// Message is one message of the dead-letter queue.
type Message struct {
	Identity
	Delivery       amqp091.Delivery
	Reason         string    // x-last-error
	Attempts       int       // x-attempt
	DeadLetteredAt time.Time // x-dead-lettered-at, else the AMQP timestamp
}

func (m *Message) matches(id string) bool {
	return id != "" && (id == m.Key || id == m.Delivery.MessageId || (m.EventID != uuid.Nil && strings.EqualFold(id, m.EventID.String())))
}

func newMessage(d amqp091.Delivery) *Message {
	m := &Message{Identity: Identify(d.Body, d.MessageId, d.Type), Delivery: d}
	if s, ok := d.Headers[amqp.HeaderLastError].(string); ok {
		m.Reason = s
	} else if d.Headers["x-first-death-reason"] != nil {
		m.Reason = fmt.Sprintf("rejected by the consumer (%v), no x-last-error", d.Headers["x-first-death-reason"])
	}
	m.Attempts = attempts(d.Headers[amqp.HeaderAttempt])
	if s, ok := d.Headers[amqp.HeaderDeadLetteredAt].(string); ok {
		m.DeadLetteredAt, _ = time.Parse(amqp.DeadLetterTimeFormat, s)
	}
	if m.DeadLetteredAt.IsZero() {
		m.DeadLetteredAt = d.Timestamp
	}
	return m
}

func attempts(v any) int {
	switch x := v.(type) {
	case int32:
		return int(x)
	case int64:
		return int(x)
	case int16:
		return int(x)
	case int8:
		return int(x)
	case int:
		return x
	}
	return 1
}

// action is what browse does with one message.
type action int

const (
	keep   action = iota // back to the tail of the dead-letter queue
	move                 // to the service's queue, resolved as replayed
	remove               // acked, resolved as dropped
)

// browse takes each message that is in the dead-letter queue when it starts, once,
// asks decide what to do with it and does it: the copy is published with a confirm
// (keep, move) and the dead_letter rows resolved (move, remove) before the original is
// acked; then it writes decide's line, if any, to w. It stops at the first error;
// unacked messages return to the queue when the connection closes.
func (s *session) browse(ctx context.Context, w io.Writer, decide func(m *Message) (action, string, error)) error {
	q, err := s.ch.QueueDeclarePassive(s.cfg.DeadLetterQueue, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("dlq: queue %s: %w", s.cfg.DeadLetterQueue, err)
	}
	for range q.Messages {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, ok, err := s.ch.Get(s.cfg.DeadLetterQueue, false)
		if err != nil {
			return fmt.Errorf("dlq: get from %s: %w", s.cfg.DeadLetterQueue, err)
		}
		if !ok {
			return nil // taken by someone else meanwhile
		}
		m := newMessage(d)
		act, line, err := decide(m)
		if err != nil {
			return err
		}
		switch act {
		case keep:
			err = s.publish(ctx, s.cfg.DeadLetterQueue, copyOf(d, false))
		case move:
			if err = s.publish(ctx, s.cfg.Queue, copyOf(d, true)); err == nil {
				err = s.resolve(ctx, m, "replayed")
			}
		case remove:
			err = s.resolve(ctx, m, "dropped")
		}
		if err != nil {
			return err
		}
		if act == move && s.cfg.pause > 0 {
			time.Sleep(s.cfg.pause) // tests kill the command here, between confirm and ack
		}
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("dlq: ack %s: %w", m.Key, err)
		}
		if line != "" {
			fmt.Fprintln(w, line)
		}
	}
	return nil
}

// publish sends msg to queue through the default exchange, mandatory, and waits for
// the confirm (at most ConfirmTimeout).
func (s *session) publish(ctx context.Context, queue string, msg amqp091.Publishing) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
	defer cancel()
	dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		return fmt.Errorf("dlq: publish %s to %s: %w", msg.MessageId, queue, err)
	}
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("dlq: publish %s to %s: no confirm: %w", msg.MessageId, queue, err)
	case !acked:
		return fmt.Errorf("dlq: publish %s to %s: nacked by the broker", msg.MessageId, queue)
	}
	select {
	case r := <-s.returns: // a return comes before its confirm
		return fmt.Errorf("dlq: publish %s to %s: returned: %s", r.MessageId, queue, r.ReplyText)
	default:
		return nil
	}
}

const resolveDeadLetter = `UPDATE dead_letter SET resolved_at = now(), resolution = $3
WHERE consumer = $1 AND message_key = $2 AND resolved_at IS NULL`

func (s *session) resolve(ctx context.Context, m *Message, resolution string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, resolveDeadLetter, s.cfg.Consumer, m.Key, resolution); err != nil {
		return fmt.Errorf("dlq: mark %s %s: %w", m.Key, resolution, err)
	}
	return nil
}

// copyOf is d as a new persistent message. For a replay the dead-letter headers are
// removed, which resets the attempt count to 1.
func copyOf(d amqp091.Delivery, replay bool) amqp091.Publishing {
	h := make(amqp091.Table, len(d.Headers))
	for k, v := range d.Headers {
		h[k] = v
	}
	if replay {
		delete(h, amqp.HeaderAttempt)
		delete(h, amqp.HeaderLastError)
		delete(h, amqp.HeaderDeadLetteredAt)
	}
	return amqp091.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp091.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		ReplyTo: d.ReplyTo, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
		UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
}

// Entry is one line of `dlq list --json`.
type Entry struct {
	EventID        *string   `json:"event_id"`
	EventName      string    `json:"event_name"`
	Attempts       int       `json:"attempts"`
	Reason         string    `json:"reason"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	MessageKey     string    `json:"message_key"`
}

func (s *session) list(ctx context.Context, stdout io.Writer, asJSON bool) error {
	entries := []Entry{}
	err := s.browse(ctx, io.Discard, func(m *Message) (action, string, error) {
		e := Entry{EventName: m.EventName, Attempts: m.Attempts, Reason: m.Reason,
			DeadLetteredAt: m.DeadLetteredAt.UTC(), MessageKey: m.Key}
		if m.EventID != uuid.Nil {
			id := m.EventID.String()
			e.EventID = &id
		}
		entries = append(entries, e)
		return keep, "", nil
	})
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT_ID\tEVENT_NAME\tATTEMPTS\tAGE\tREASON")
	now := time.Now()
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.MessageKey, orDash(e.EventName), e.Attempts,
			age(now, e.DeadLetteredAt), oneLine(e.Reason, 120))
	}
	fmt.Fprintf(tw, "%d messages in %s\n", len(entries), s.cfg.DeadLetterQueue)
	return tw.Flush()
}

func (s *session) show(ctx context.Context, stdout io.Writer, id string) error {
	var found *Message
	err := s.browse(ctx, io.Discard, func(m *Message) (action, string, error) {
		if found == nil && m.matches(id) {
			found = m
		}
		return keep, "", nil
	})
	if err != nil {
		return err
	}
	if found == nil {
		return fmt.Errorf("dlq show: %s is not in %s", id, s.cfg.DeadLetterQueue)
	}
	d := found.Delivery
	var body any = string(d.Body)
	if json.Valid(d.Body) {
		body = json.RawMessage(d.Body)
	}
	out := map[string]any{
		"message_key": found.Key, "event_name": found.EventName, "attempts": found.Attempts,
		"reason": found.Reason, "dead_lettered_at": found.DeadLetteredAt.UTC(),
		"properties": map[string]any{
			"message_id": d.MessageId, "type": d.Type, "content_type": d.ContentType,
			"correlation_id": d.CorrelationId, "timestamp": d.Timestamp.UTC(), "delivery_mode": d.DeliveryMode,
			"routing_key": d.RoutingKey,
		},
		"headers": d.Headers,
		"body":    body,
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// Verdicts of replay, one per message.
const (
	VerdictApply     = "apply"
	VerdictDuplicate = "duplicate"
	VerdictExpired   = "older than the inbox purge horizon"
	VerdictNoEvent   = "no event_id"
	VerdictInvalid   = "would dead-letter again"
)

// verdict says what replaying m would do, in the order the consumer decides it:
// no event_id, then the consumer's check (Config.Check, whose error is the reason
// returned), then its inbox key, then the horizon.
func (s *session) verdict(ctx context.Context, m *Message) (verdict, reason string, err error) {
	if m.EventID == uuid.Nil {
		return VerdictNoEvent, "", nil
	}
	if s.cfg.Check != nil {
		if err := s.cfg.Check(m.Delivery); err != nil {
			return VerdictInvalid, err.Error(), nil
		}
	}
	dup, err := s.processed(ctx, m.EventID)
	if err != nil {
		return "", "", err
	}
	switch {
	case dup:
		return VerdictDuplicate, "", nil
	case !m.OccurredAt.IsZero() && time.Since(m.OccurredAt) > s.cfg.Horizon:
		return VerdictExpired, "", nil
	}
	return VerdictApply, "", nil
}

// processed reports whether the inbox holds the event's key: replaying it then
// changes nothing, the consumer skips it as a duplicate.
func (s *session) processed(ctx context.Context, eventID uuid.UUID) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM processed_event WHERE consumer = $1 AND message_key = $2)`,
		s.cfg.Consumer, eventID.String()).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("dlq: look up the inbox key of %s: %w", eventID, err)
	}
	return ok, nil
}

func (s *session) replay(ctx context.Context, stdout io.Writer, ids []string, dryRun, force bool) error {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = false
	}
	var moved, refused, dup int
	err := s.browse(ctx, stdout, func(m *Message) (action, string, error) {
		if len(ids) > 0 {
			hit := false
			for _, id := range ids {
				if !want[id] && m.matches(id) {
					want[id], hit = true, true
					break
				}
			}
			if !hit {
				return keep, "", nil
			}
		}
		v, reason, err := s.verdict(ctx, m)
		if err != nil {
			return keep, "", err
		}
		verb, act := "replayed", move
		switch {
		case (v == VerdictExpired || v == VerdictNoEvent || v == VerdictInvalid) && !force:
			verb, act = "refused", keep
			refused++
		case dryRun:
			verb, act = "would replay", keep
		}
		note := v
		switch v {
		case VerdictDuplicate:
			dup++
			note += ": already processed, the consumer will skip it"
		case VerdictExpired:
			note = fmt.Sprintf("%s (%s): its inbox key may be purged", v, s.cfg.Horizon)
		case VerdictNoEvent:
			note += ": not an event envelope, it will fail again"
		case VerdictInvalid:
			note += ": " + oneLine(reason, 200)
		}
		if verb == "refused" {
			note += "; --force replays it"
		}
		if act == move {
			moved++
			s.cfg.Logger.Info("replaying dead letter", slog.String("message_key", m.Key),
				slog.String("event_name", m.EventName), slog.String("verdict", v), slog.String("queue", s.cfg.Queue))
		}
		return act, fmt.Sprintf("%-12s  %-36s  %-24s  %s", verb, m.Key, orDash(m.EventName), note), nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d replayed to %s, %d refused, %d duplicates%s\n", moved, s.cfg.Queue, refused, dup,
		map[bool]string{true: " (dry run: nothing changed)", false: ""}[dryRun])
	if missing := notFound(ids, want); len(missing) > 0 {
		return fmt.Errorf("dlq replay: not in %s: %s", s.cfg.DeadLetterQueue, strings.Join(missing, ", "))
	}
	if refused > 0 {
		return fmt.Errorf("dlq replay: %d messages refused; see above", refused)
	}
	return nil
}

func (s *session) drop(ctx context.Context, stdout io.Writer, ids []string) error {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = false
	}
	n := 0
	err := s.browse(ctx, stdout, func(m *Message) (action, string, error) {
		for _, id := range ids {
			if !want[id] && m.matches(id) {
				want[id] = true
				n++
				s.cfg.Logger.Warn("dead letter dropped", slog.String("message_key", m.Key),
					slog.String("event_name", m.EventName), slog.Int("attempts", m.Attempts), slog.String("reason", m.Reason))
				return remove, fmt.Sprintf("%-12s  %-36s  %s", "dropped", m.Key, orDash(m.EventName)), nil
			}
		}
		return keep, "", nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d dropped from %s\n", n, s.cfg.DeadLetterQueue)
	if missing := notFound(ids, want); len(missing) > 0 {
		return fmt.Errorf("dlq drop: not in %s: %s", s.cfg.DeadLetterQueue, strings.Join(missing, ", "))
	}
	return nil
}

func notFound(ids []string, seen map[string]bool) []string {
	var out []string
	for _, id := range ids {
		if !seen[id] {
			out = append(out, id)
		}
	}
	return out
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
