package auditor

import (
	"context"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
)

// UnknownDeadLetter is an open dead letter of a message no producer's outbox holds:
// a message published to the exchange by hand or forged, a copy of unknown origin,
// one without a usable event_id, or an event whose outbox row was purged. The audit
// counts it apart from the dead letters of published events; it awaits a decision all
// the same (docs/operations.md, "Dead letters of unknown messages").
type UnknownDeadLetter struct {
	Consumer string `json:"consumer"`
	// MessageKey is the dead_letter row's key: an event_id, an AMQP message_id, or
	// "sha256:" and the body's hash.
	MessageKey     string    `json:"message_key"`
	EventName      string    `json:"event_name,omitempty"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	Reason         string    `json:"reason"`
	Attempts       int       `json:"attempts"`
}

// maxOpenDeadLettersRead bounds the open dead letters read per consumer and cycle.
const maxOpenDeadLettersRead = 1000

// unknownDeadLetters returns, per consumer with a dead_letter table, its open dead
// letters (the oldest maxOpenDeadLettersRead) whose message key is the id of no row of
// any producer's outbox, oldest first.
func (a *Audit) unknownDeadLetters(ctx context.Context) (map[string][]UnknownDeadLetter, error) {
	out := map[string][]UnknownDeadLetter{}
	for _, c := range contracts.Consumers() {
		open, ok, err := a.st.OpenDeadLetters(ctx, c.Name, maxOpenDeadLettersRead)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var ids []uuid.UUID
		for _, d := range open {
			if id, err := uuid.Parse(d.MessageKey); err == nil && id.String() == d.MessageKey {
				ids = append(ids, id)
			}
		}
		known := map[string]bool{}
		for _, p := range contracts.Producers() {
			if len(ids) == 0 {
				break
			}
			rows, err := a.st.OutboxByIDs(ctx, p.Name, ids)
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				known[r.ID.String()] = true
			}
		}
		list := []UnknownDeadLetter{}
		for _, d := range open {
			if !known[d.MessageKey] {
				list = append(list, UnknownDeadLetter{Consumer: c.Name, MessageKey: d.MessageKey, EventName: d.EventName,
					DeadLetteredAt: d.DeadLetteredAt, Reason: d.Reason, Attempts: d.Attempts})
			}
		}
		out[c.Name] = list
	}
	return out, nil
}
