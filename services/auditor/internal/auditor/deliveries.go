package auditor

import (
	"context"
	"time"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/services/auditor/internal/store"
)

// Delivery is one consumer's state for one event.
type Delivery struct {
	Consumer    string          `json:"consumer"`
	State       State           `json:"state"`
	ProcessedAt *time.Time      `json:"processed_at,omitempty"`
	DeadLetter  *DeadLetterView `json:"dead_letter,omitempty"`
}

// DeadLetterView is a consumer's dead-letter record of an event.
type DeadLetterView struct {
	Reason         string     `json:"reason"`
	Attempts       int        `json:"attempts"`
	DeadLetteredAt time.Time  `json:"dead_lettered_at"`
	ResolvedAt     *time.Time `json:"resolved_at,omitempty"`
	Resolution     string     `json:"resolution,omitempty"`
}

// deliveries reads, for every row, the state of each consumer that receives its event
// (contracts.ConsumersOf): one processed_event query per consumer, and one dead_letter
// query per consumer for the events it has no key for.
func deliveries(ctx context.Context, st *store.Store, rows []store.OutboxRow, now time.Time, grace time.Duration) (map[uuid.UUID][]Delivery, error) {
	out := make(map[uuid.UUID][]Delivery, len(rows))
	for _, c := range contracts.Consumers() {
		var ids []uuid.UUID
		for _, r := range rows {
			if c.Receives(r.EventName) {
				ids = append(ids, r.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		processed, err := st.Processed(ctx, c.Name, ids)
		if err != nil {
			return nil, err
		}
		var without []uuid.UUID
		for _, id := range ids {
			if _, ok := processed[id]; !ok {
				without = append(without, id)
			}
		}
		dead := map[uuid.UUID]store.DeadLetter{}
		if len(without) > 0 {
			if dead, err = st.DeadLetters(ctx, c.Name, without); err != nil {
				return nil, err
			}
		}
		for _, r := range rows {
			if !c.Receives(r.EventName) {
				continue
			}
			d := Delivery{Consumer: c.Name}
			var pAt *time.Time
			if at, ok := processed[r.ID]; ok {
				pAt = &at
				d.ProcessedAt = pAt
			}
			var dl *store.DeadLetter
			if rec, ok := dead[r.ID]; ok {
				dl = &rec
				d.DeadLetter = &DeadLetterView{Reason: rec.Reason, Attempts: rec.Attempts,
					DeadLetteredAt: rec.DeadLetteredAt, ResolvedAt: rec.ResolvedAt, Resolution: rec.Resolution}
			}
			d.State = classify(r, pAt, dl, now, grace)
			out[r.ID] = append(out[r.ID], d)
		}
	}
	return out, nil
}
