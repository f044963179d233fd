// Package events applies the order events to the shipping database: the
// handlers of order.order.placed.v1 and order.order.cancelled.v1 that run
// inside the inbox's transaction.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/logging"
	"example.com/shop/services/shipping/internal/shipping"
	"example.com/shop/services/shipping/internal/store"
)

// Consumer is the name shipping records its processed_event keys under.
const Consumer = "shipping"

// Queue returns the shipping service's queue: shipping.events bound to the events
// Register handles, with its dead-letter queue shipping.events.dlq (docs/architecture.md,
// "The flow"). It has no retry delays; consumerapp.Topology adds the configured ones.
func Queue() amqp.QueueSpec {
	return amqp.QueueSpec{
		Name:            contracts.QueueShipping,
		DeadLetterQueue: contracts.QueueShippingDLQ,
		RoutingKeys:     []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled},
	}
}

// Register adds the shipping handlers to in: order.order.placed.v1 records the
// status placed, order.order.cancelled.v1 the status cancelled, each through
// store.Apply (docs/architecture.md, rule 4). Stale events are logged to logger at info
// level (nil discards) and acknowledged: they are not failures.
func Register(in *inbox.Inbox, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := handlers{logger: logger}
	in.Register(contracts.EventOrderPlaced, h.placed)
	in.Register(contracts.EventOrderCancelled, h.cancelled)
}

type handlers struct {
	logger *slog.Logger
}

func (h handlers) placed(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
	var p contracts.OrderPlaced
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("decode %s payload: %w: %w", env.EventName, amqp.ErrPermanent, err)
	}
	return h.apply(ctx, tx, env, p.OrderID, shipping.StatusPlaced, p.Version)
}

func (h handlers) cancelled(ctx context.Context, tx pgx.Tx, env contracts.Envelope) error {
	var p contracts.OrderCancelled
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("decode %s payload: %w: %w", env.EventName, amqp.ErrPermanent, err)
	}
	return h.apply(ctx, tx, env, p.OrderID, shipping.StatusCancelled, p.Version)
}

// apply records the change carried by env. Only the payload version orders
// changes; env.EventID and env.OccurredAt play no part.
func (h handlers) apply(ctx context.Context, tx pgx.Tx, env contracts.Envelope, orderID uuid.UUID, status shipping.Status, version int) error {
	c := shipping.StatusChange{OrderID: orderID, Status: status, Version: version}
	applied, err := store.Apply(ctx, tx, c)
	if errors.Is(err, shipping.ErrInvalidChange) {
		return fmt.Errorf("%s: %w: %w", env.EventName, amqp.ErrPermanent, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", env.EventName, err)
	}
	if !applied {
		logging.WithEvent(h.logger, env.EventID.String(), env.CorrelationID).LogAttrs(ctx, slog.LevelInfo,
			"stale order event ignored: a version at least as new is already recorded",
			slog.String("event_name", env.EventName), slog.String("order_id", orderID.String()), slog.Int("version", version))
	}
	return nil
}
