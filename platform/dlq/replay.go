package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
)

// Stale is a consuming service's own word on an event its inbox has not seen: a
// non-empty note (such as "order at version 3, this event is version 2") when its
// consumer would apply the event and change nothing, because the service's state has
// moved past it (docs/architecture.md, rule 4); "" when it would change something.
// It reads through tx, which it must not end. replay asks it for every valid event
// that is not a duplicate (Config.Stale).
type Stale func(ctx context.Context, tx pgx.Tx, env contracts.Envelope) (note string, err error)

// Verdicts of replay, one per message.
const (
	VerdictApply     = "apply"
	VerdictDuplicate = "duplicate"
	VerdictConflict  = "conflict"
	VerdictStale     = "stale"
	VerdictExpired   = "older than the inbox purge horizon"
	VerdictNoEvent   = "no event_id"
	VerdictInvalid   = "would dead-letter again"
)

// verdict says what replaying m would do, in the order the consumer decides it:
// no event_id, then the consumer's check (Config.Check, whose error is the reason
// returned), then its inbox key (a duplicate when the key is stored with m's
// content hash, inbox.ContentSum, or with none; a conflict, dead-lettered again,
// when with another), then the horizon, then the service's own state
// (Config.Stale, whose note is the reason returned). It reads through tx.
func (s *session) verdict(ctx context.Context, tx pgx.Tx, m *Message) (verdict, reason string, err error) {
	if m.EventID == uuid.Nil {
		return VerdictNoEvent, "", nil
	}
	if s.cfg.Check != nil {
		if err := s.cfg.Check(m.Delivery); err != nil {
			return VerdictInvalid, err.Error(), nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var stored []byte
	err = tx.QueryRow(ctx, `SELECT coalesce(payload_sha256, '') FROM processed_event WHERE consumer = $1 AND message_key = $2`,
		s.cfg.Consumer, m.EventID.String()).Scan(&stored)
	dup := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", "", fmt.Errorf("dlq: look up the inbox key of %s: %w", m.EventID, err)
	}
	var env contracts.Envelope
	decoded := json.Unmarshal(m.Delivery.Body, &env) == nil
	switch {
	case dup:
		if sum, err := inbox.ContentSum(env); decoded && len(stored) > 0 && err == nil && !bytes.Equal(sum, stored) {
			return VerdictConflict, "", nil
		}
		return VerdictDuplicate, "", nil
	case !m.OccurredAt.IsZero() && time.Since(m.OccurredAt) > s.cfg.Horizon:
		return VerdictExpired, "", nil
	}
	if s.cfg.Stale != nil {
		if decoded {
			note, err := s.cfg.Stale(ctx, tx, env)
			if err != nil {
				return "", "", fmt.Errorf("dlq: is %s stale: %w", m.EventID, err)
			}
			if note != "" {
				return VerdictStale, note, nil
			}
		}
	}
	return VerdictApply, "", nil
}

// tally counts what one replay or drop run did.
type tally struct {
	done, refused, dup, stale, taken, resolved int
	notFound                                   []string
}

func (s *session) line(w io.Writer, verb, key, name, note string) {
	fmt.Fprintf(w, "%-12s  %-36s  %-24s  %s\n", verb, key, orDash(name), note)
}

// targets are the keys a run settles: the ids given, else every open record's key
// and every key of the dead-letter queue's copies.
func (s *session) targets(ctx context.Context, ids []string, c *copies) ([]string, error) {
	if len(ids) > 0 {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = keyOf(id)
			if ms := c.of(id); len(ms) > 0 && c.byKey[out[i]] == nil {
				out[i] = ms[0].Key // an id naming a copy by its message_id
			}
		}
		return out, nil
	}
	recs, err := s.openRecords(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, r := range recs {
		if !seen[r.key] {
			seen[r.key] = true
			out = append(out, r.key)
		}
	}
	for _, k := range c.keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out, nil
}

// holder is scan's hold for a run over ids (every message when there are none).
func holder(ids []string) func(m *Message) bool {
	return func(m *Message) bool {
		if len(ids) == 0 {
			return true
		}
		for _, id := range ids {
			if m.matches(id) || m.Key == keyOf(id) {
				return true
			}
		}
		return false
	}
}

func (s *session) replay(ctx context.Context, stdout io.Writer, ids []string, dryRun, force bool) error {
	var hold func(*Message) bool
	if !dryRun {
		hold = holder(ids)
	}
	c, err := s.scan(ctx, hold)
	if err != nil {
		return err
	}
	keys, err := s.targets(ctx, ids, c)
	if err != nil {
		return err
	}
	var t tally
	for _, key := range keys {
		if err := s.replayOne(ctx, stdout, key, c, dryRun, force, len(ids) > 0, &t); err != nil {
			return err
		}
	}
	note := ""
	if dryRun {
		note = " (dry run: nothing changed)"
	}
	fmt.Fprintf(stdout, "%d replayed to %s, %d refused, %d duplicates, %d stale, %d taken by another run, %d already resolved%s\n",
		t.done, s.cfg.Queue, t.refused, t.dup, t.stale, t.taken, t.resolved, note)
	if len(t.notFound) > 0 {
		return fmt.Errorf("dlq replay: not recorded and not in %s: %s", s.cfg.DeadLetterQueue, strings.Join(t.notFound, ", "))
	}
	if t.refused > 0 {
		return fmt.Errorf("dlq replay: %d messages refused; see above", t.refused)
	}
	return nil
}

// replayOne settles key: its open records are locked, the message they keep (else
// its queue copy) is published to the queue with a confirm, the records resolved and
// committed, then its copies removed from the dead-letter queue. A key named on the
// command line whose dead letter was dropped is refused, or undropped and replayed
// in one transaction with force (replayDropped).
func (s *session) replayOne(ctx context.Context, w io.Writer, key string, c *copies, dryRun, force, named bool, t *tally) error {
	tx, recs, waited, err := s.lock(ctx, key)
	if errors.Is(err, errTaken) {
		t.taken++
		s.line(w, "taken", key, "", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	if tx == nil {
		return s.unrecorded(ctx, w, key, c, waited, dryRun, force, named, t)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	return s.replayLocked(ctx, w, key, c, tx, recs, dryRun, force, t)
}

// replayLocked is replayOne of key's open records recs, locked by tx: it commits tx
// when it replays, and leaves it to the caller to roll back otherwise.
func (s *session) replayLocked(ctx context.Context, w io.Writer, key string, c *copies, tx pgx.Tx, recs []record, dryRun, force bool, t *tally) error {
	inQueue := c.byKey[key]
	m := recordedMessage(recs)
	fromRecord := m != nil
	if m == nil && len(inQueue) > 0 {
		m = inQueue[0]
	}
	name := recs[0].identity().EventName
	if m == nil {
		t.refused++
		s.line(w, "refused", key, name, "the record keeps no message (written before it did) and "+
			s.cfg.DeadLetterQueue+" holds no copy: the producer's replay-outbox sends the event again; dlq drop closes it")
		return nil
	}
	act, settled, err := s.decide(ctx, w, tx, m, dryRun, force, t, copyNote(fromRecord, len(inQueue) > 0, s.cfg.DeadLetterQueue))
	if err != nil || !act {
		return err
	}
	if err := s.publish(ctx, s.cfg.Queue, s.replayCopy(m, force)); err != nil {
		return err
	}
	if s.cfg.pause > 0 {
		time.Sleep(s.cfg.pause) // tests kill the command here, between confirm and commit
	}
	if err := s.resolve(ctx, tx, recs, "replayed"); err != nil {
		return err
	}
	if err := s.ack(c, inQueue); err != nil {
		return err
	}
	settled()
	return nil
}

// unrecorded settles a key without an open record: one resolved meanwhile by another
// run (waited) or before, whose copies in the queue are stale and removed; one dropped
// and named (replayDropped); or a copy that never had a record, replayed from the copy.
func (s *session) unrecorded(ctx context.Context, w io.Writer, key string, c *copies, waited, dryRun, force, named bool, t *tally) error {
	inQueue := c.byKey[key]
	rec, ok, err := s.latestRecord(ctx, key)
	if err != nil {
		return err
	}
	if ok && named && !waited && dropped(rec) {
		return s.replayDropped(ctx, w, key, c, dryRun, force, t)
	}
	if ok {
		verb, note := "resolved", resolvedNote(rec)
		if waited {
			verb, note = "taken", note+" by another run"
			t.taken++
		} else {
			t.resolved++
		}
		if len(inQueue) > 0 && !dryRun {
			note += "; its stale copy removed from " + s.cfg.DeadLetterQueue
			if err := s.ack(c, inQueue); err != nil {
				return err
			}
		}
		s.line(w, verb, key, rec.identity().EventName, note)
		return nil
	}
	if len(inQueue) == 0 {
		t.notFound = append(t.notFound, key)
		return nil
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("dlq: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	m := inQueue[0]
	act, settled, err := s.decide(ctx, w, tx, m, dryRun, force, t, "no record: from the copy in "+s.cfg.DeadLetterQueue)
	if err != nil || !act {
		return err
	}
	if err := s.publish(ctx, s.cfg.Queue, s.replayCopy(m, force)); err != nil {
		return err
	}
	if err := s.ack(c, inQueue); err != nil {
		return err
	}
	settled()
	return nil
}

// decide says what replaying m does, as a line for w, and whether to do it: w gets
// the line at once when not, else after it is done (settled).
func (s *session) decide(ctx context.Context, w io.Writer, tx pgx.Tx, m *Message, dryRun, force bool, t *tally, source string) (act bool, settled func(), err error) {
	v, reason, err := s.verdict(ctx, tx, m)
	if err != nil {
		return false, nil, err
	}
	verb := "replayed"
	act = true
	switch {
	case (v == VerdictExpired || v == VerdictNoEvent || v == VerdictInvalid || v == VerdictConflict) && !force:
		verb, act = "refused", false
		t.refused++
	case dryRun:
		verb, act = "would replay", false
	}
	note := v
	switch v {
	case VerdictDuplicate:
		t.dup++
		note += ": already processed, the consumer will skip it"
	case VerdictConflict:
		note += ": its event_id was processed with another content, the consumer will dead-letter it again"
	case VerdictStale:
		t.stale++
		note += ": will change nothing (" + oneLine(reason, 200) + ")"
	case VerdictExpired:
		note = fmt.Sprintf("%s (%s): its inbox key may be purged", v, s.cfg.Horizon)
	case VerdictNoEvent:
		note += ": not an event envelope, it will fail again"
	case VerdictInvalid:
		note += ": " + oneLine(reason, 200)
	}
	if source != "" {
		note += "; " + source
	}
	if verb == "refused" {
		note += "; --force replays it"
	}
	if act {
		t.done++
		s.cfg.Logger.Info("replaying dead letter", slog.String("message_key", m.Key),
			slog.String("event_name", m.EventName), slog.String("verdict", v), slog.String("queue", s.cfg.Queue))
	}
	settled = func() { s.line(w, verb, m.Key, m.EventName, note) }
	if !act {
		settled()
	}
	return act, settled, nil
}

// replayCopy is m as replay sends it back to the queue (copyOf), with the origin
// the consumer accepts for its event when force and Config.Vouch are set.
func (s *session) replayCopy(m *Message, force bool) amqp091.Publishing {
	msg := copyOf(m.Delivery, s.cfg.Queue, true)
	if force && s.cfg.Vouch != nil {
		s.cfg.Vouch(m.EventName).Stamp(msg.Headers)
	}
	return msg
}

// copyNote says where a replayed message comes from.
func copyNote(fromRecord, inQueue bool, dlq string) string {
	switch {
	case fromRecord && !inQueue:
		return "from the record; no copy in " + dlq
	case !fromRecord:
		return "from the copy in " + dlq + " (the record keeps no message)"
	}
	return ""
}

func (s *session) drop(ctx context.Context, stdout io.Writer, ids []string) error {
	c, err := s.scan(ctx, holder(ids))
	if err != nil {
		return err
	}
	keys, err := s.targets(ctx, ids, c)
	if err != nil {
		return err
	}
	var t tally
	for _, key := range keys {
		if err := s.dropOne(ctx, stdout, key, c, &t); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%d dropped, %d taken by another run, %d already resolved\n", t.done, t.taken, t.resolved)
	if len(t.notFound) > 0 {
		return fmt.Errorf("dlq drop: not recorded and not in %s: %s", s.cfg.DeadLetterQueue, strings.Join(t.notFound, ", "))
	}
	return nil
}

func (s *session) dropOne(ctx context.Context, w io.Writer, key string, c *copies, t *tally) error {
	inQueue := c.byKey[key]
	tx, recs, waited, err := s.lock(ctx, key)
	if errors.Is(err, errTaken) {
		t.taken++
		s.line(w, "taken", key, "", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	var m Message
	keyNote := "no open record: no inbox key written"
	switch {
	case tx != nil:
		defer func() { _ = tx.Rollback(ctx) }()
		m = Message{Identity: recs[0].identity(), Reason: recs[0].reason, Attempts: recs[0].attempts}
		if keyNote, err = s.dropKey(ctx, tx, recs, inQueue); err != nil {
			return err
		}
		if err := s.resolve(ctx, tx, recs, "dropped"); err != nil {
			return err
		}
	case len(inQueue) == 0:
		if rec, ok, err := s.latestRecord(ctx, key); err != nil {
			return err
		} else if ok {
			verb := "resolved"
			if waited {
				verb = "taken"
				t.taken++
			} else {
				t.resolved++
			}
			s.line(w, verb, key, rec.identity().EventName, resolvedNote(rec))
			return nil
		}
		t.notFound = append(t.notFound, key)
		return nil
	default:
		m = *inQueue[0] // a copy without an open record
	}
	if err := s.ack(c, inQueue); err != nil {
		return err
	}
	t.done++
	s.cfg.Logger.Warn("dead letter dropped", slog.String("message_key", key),
		slog.String("event_name", m.EventName), slog.Int("attempts", m.Attempts), slog.String("reason", m.Reason))
	s.line(w, "dropped", key, m.EventName, fmt.Sprintf("%d copies removed from %s; %s", len(inQueue), s.cfg.DeadLetterQueue, keyNote))
	return nil
}
