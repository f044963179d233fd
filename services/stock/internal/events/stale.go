package events

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/services/stock/internal/store"
)

// Stale is stock's answer to `stock dlq replay` (dlq.Stale): an order event whose
// version does not win store.ApplyStatus, because stock's order_status already holds
// that version or a newer one, changes nothing here (docs/architecture.md, rule 4);
// its note names both versions. An event without an order id and version, or of an
// order stock has not seen, is not stale. It reads through tx.
func Stale(ctx context.Context, tx pgx.Tx, env contracts.Envelope) (string, error) {
	var p struct {
		OrderID uuid.UUID `json:"order_id"`
		Version int       `json:"version"`
	}
	if err := json.Unmarshal(env.Payload, &p); err != nil || p.OrderID == uuid.Nil {
		return "", nil //nolint:nilerr // a payload the handlers refuse is their verdict, not staleness
	}
	stored, found, err := store.StatusVersion(ctx, tx, p.OrderID)
	if err != nil || !found || stored < p.Version {
		return "", err
	}
	return fmt.Sprintf("order %s is at version %d in stock, the event carries version %d", p.OrderID, stored, p.Version), nil
}
