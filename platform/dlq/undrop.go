package dlq

import (
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
	"github.com/jackc/pgx/v5/pgconn"

	"example.com/shop/contracts"
	"example.com/shop/platform/inbox"
)

// dropped reports whether r was closed by `dlq drop`.
func dropped(r record) bool { return r.resolution != nil && *r.resolution == "dropped" }

// dropKey writes, in tx, the inbox key of the message recs (open rows of one key,
// newest first) keep as dropped: processed_event (consumer, event_id) with outcome
// 'dropped' and the envelope's content hash (inbox.ContentSum; NULL when neither the
// record nor a copy in inQueue keeps a message that decodes), so that the consumer
// skips any later copy as a duplicate. A key already there (a copy was processed, or
// dropped, before) is kept as it is. A message without an event_id gets no key: the
// consumer's inbox keys event_ids only, and fails such a message wherever it comes
// from. It returns what it did, for the command's line.
func (s *session) dropKey(ctx context.Context, tx pgx.Tx, recs []record, inQueue []*Message) (string, error) {
	id := recs[0].identity()
	if id.EventID == uuid.Nil {
		return "no event_id: no inbox key written", nil
	}
	m := recordedMessage(recs)
	if m == nil && len(inQueue) > 0 {
		m = inQueue[0]
	}
	var sum []byte
	var env contracts.Envelope
	if m != nil && json.Unmarshal(m.Delivery.Body, &env) == nil && env.EventID == id.EventID {
		sum, _ = inbox.ContentSum(env) // nil when it does not encode: content unknown
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tag, err := tx.Exec(ctx, `INSERT INTO processed_event (consumer, message_key, payload_sha256, outcome)
VALUES ($1, $2, $3, 'dropped') ON CONFLICT DO NOTHING`, s.cfg.Consumer, id.EventID.String(), sum)
	if err != nil {
		return "", fmt.Errorf("dlq: write the dropped inbox key of %s: %w", id.EventID, err)
	}
	if tag.RowsAffected() == 0 {
		return "its inbox key was already there (a copy processed or dropped before): kept", nil
	}
	return "inbox key written as dropped: a later copy is skipped as a duplicate", nil
}

// undropping is key's last drop, undone in tx and not yet committed.
type undropping struct {
	tx   pgx.Tx   // nil when nothing is undone; verb says why
	recs []record // the rows reopened, locked by tx
	verb string   // "reopened", "taken", "not dropped", "refused"
	note string
}

// undropTx undoes key's last drop in a transaction it returns uncommitted: it locks
// every row of key (waiting for another run at most lockWait), and when the newest
// is dropped deletes key's inbox key if its outcome is 'dropped' and reopens the rows
// that drop closed. A key the consumer processed itself is never deleted: undropTx
// then refuses, the dead letter stays dropped. u.tx is nil unless verb is "reopened";
// u.verb is "" when key has no record.
func (s *session) undropTx(ctx context.Context, key string) (u undropping, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return u, fmt.Errorf("dlq: begin: %w", err)
	}
	defer func() {
		if u.tx == nil {
			_ = tx.Rollback(ctx)
		}
	}()
	qctx, cancel := context.WithTimeout(ctx, lockWait+10*time.Second)
	defer cancel()
	if _, err := tx.Exec(qctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", lockWait.Milliseconds())); err != nil {
		return u, fmt.Errorf("dlq: lock dead_letter of %s: %w", key, err)
	}
	rows, _ := tx.Query(qctx, `SELECT `+recordColumns+` FROM dead_letter WHERE consumer = $1 AND message_key = $2
ORDER BY resolved_at IS NULL DESC, dead_lettered_at DESC, id DESC FOR UPDATE`, s.cfg.Consumer, key)
	all, err := pgx.CollectRows(rows, scanRecord)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
		return undropping{verb: "taken", note: errTaken.Error()}, nil
	case err != nil:
		return u, fmt.Errorf("dlq: lock dead_letter of %s: %w", key, err)
	case len(all) == 0:
		return u, nil
	case all[0].resolution == nil:
		return undropping{recs: all[:1], verb: "not dropped", note: "open: dlq replay applies it"}, nil
	case !dropped(all[0]):
		return undropping{recs: all[:1], verb: "not dropped", note: resolvedNote(all[0])}, nil
	}
	var ids []int64
	var recs []record
	for _, r := range all {
		if dropped(r) && r.resolvedAt.Equal(*all[0].resolvedAt) { // closed by the same drop
			ids = append(ids, r.id)
			r.resolvedAt, r.resolution = nil, nil
			recs = append(recs, r)
		}
	}
	tag, err := tx.Exec(qctx, `DELETE FROM processed_event WHERE consumer = $1 AND message_key = $2 AND outcome = 'dropped'`,
		s.cfg.Consumer, key)
	if err != nil {
		return u, fmt.Errorf("dlq: delete the dropped inbox key of %s: %w", key, err)
	}
	note := "dropped inbox key deleted"
	if tag.RowsAffected() == 0 {
		var at time.Time
		err := tx.QueryRow(qctx, `SELECT processed_at FROM processed_event WHERE consumer = $1 AND message_key = $2`,
			s.cfg.Consumer, key).Scan(&at)
		switch {
		case err == nil:
			return undropping{recs: recs, verb: "refused", note: fmt.Sprintf(
				"the consumer processed it at %s (not a drop): its effect is applied, its inbox key and the dropped dead letter stay",
				at.UTC().Format(time.RFC3339))}, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return u, fmt.Errorf("dlq: read the inbox key of %s: %w", key, err)
		}
		note = "no inbox key (dropped before drops wrote one, or purged)"
		if all[0].identity().EventID == uuid.Nil {
			note = "no inbox key (a message without an event_id has none)"
		}
	}
	if _, err := tx.Exec(qctx, `UPDATE dead_letter SET resolved_at = NULL, resolution = NULL WHERE id = ANY($1)`, ids); err != nil {
		return u, fmt.Errorf("dlq: reopen %s: %w", key, err)
	}
	return undropping{tx: tx, recs: recs, verb: "reopened", note: note}, nil
}

// undrop runs `dlq undrop`: each key's last drop undone and committed, one
// transaction each (undropTx); nothing committed with dryRun.
func (s *session) undrop(ctx context.Context, w io.Writer, ids []string, dryRun bool) error {
	var done, not, refused, taken int
	var notFound []string
	for _, id := range ids {
		key := keyOf(id)
		u, err := s.undropTx(ctx, key)
		if err != nil {
			return err
		}
		name := ""
		if len(u.recs) > 0 {
			name = u.recs[0].identity().EventName
		}
		note := u.note
		switch u.verb {
		case "":
			notFound = append(notFound, key)
			continue
		case "taken":
			taken++
		case "not dropped":
			not++
		case "refused":
			refused++
		case "reopened":
			note += "; open again: `dlq replay " + key + "` applies it, and so would a later copy"
			if u.recs[0].identity().EventID == uuid.Nil {
				note = u.note + "; open again: `dlq replay` refuses it (no event_id), `dlq drop` closes it"
			}
			if dryRun {
				_ = u.tx.Rollback(ctx)
				u.verb = "would reopen"
			} else if err := u.tx.Commit(ctx); err != nil {
				return fmt.Errorf("dlq: reopen %s: commit: %w", key, err)
			} else {
				s.cfg.Logger.Warn("dead letter undropped", slog.String("message_key", key), slog.String("event_name", name))
			}
			done++
		}
		s.line(w, u.verb, key, name, note)
	}
	dry := ""
	if dryRun {
		dry = " (dry run: nothing changed)"
	}
	fmt.Fprintf(w, "%d reopened, %d refused, %d not dropped, %d taken by another run%s\n", done, refused, not, taken, dry)
	if len(notFound) > 0 {
		return fmt.Errorf("dlq undrop: not recorded: %s", strings.Join(notFound, ", "))
	}
	if refused > 0 {
		return fmt.Errorf("dlq undrop: %d refused; see above", refused)
	}
	return nil
}

// replayDropped is replay of a key named on the command line whose newest record is
// dropped: refused without force; with force, undropped and replayed in one
// transaction (undropTx, then replayLocked, whose verdict no longer sees the
// dropped key), each step said on its own line.
func (s *session) replayDropped(ctx context.Context, w io.Writer, key string, c *copies, dryRun, force bool, t *tally) error {
	if !force {
		t.refused++
		s.line(w, "refused", key, "", "dropped: `dlq undrop "+key+"` reopens it; `dlq replay --force "+key+"` undrops and replays it")
		return nil
	}
	u, err := s.undropTx(ctx, key)
	if err != nil {
		return err
	}
	switch u.verb {
	case "reopened":
	case "taken":
		t.taken++
		s.line(w, "taken", key, "", u.note)
		return nil
	case "refused":
		t.refused++
		s.line(w, "refused", key, u.recs[0].identity().EventName, u.note)
		return nil
	default: // replayed, reopened or gone meanwhile: the next run sees it as it is now
		t.taken++
		s.line(w, "taken", key, "", "changed by another run meanwhile")
		return nil
	}
	defer func() { _ = u.tx.Rollback(ctx) }()
	verb := "undropped"
	if dryRun {
		verb = "would undrop"
	}
	s.line(w, verb, key, u.recs[0].identity().EventName, u.note+"; --force: replayed in the same transaction")
	return s.replayLocked(ctx, w, key, c, u.tx, u.recs, dryRun, force, t)
}
