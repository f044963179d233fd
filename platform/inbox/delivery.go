package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"example.com/shop/platform/amqp"
)

// HandleDelivery is an amqp.HandlerFunc that decodes d.Body as an event envelope,
// validates it against the contract (contracts.Validator.Decode) and runs Process.
//
// It returns nil when the event was processed or was a duplicate, so the runtime acks
// it (DESIGN.md rule 3: commit, then ack). A body that does not decode or fails its
// schema (which includes an event_id that is not a UUID v7), or an event with no
// registered Handler, can never succeed: the error then wraps amqp.ErrPermanent and the
// delivery goes to the dead-letter queue at once, without any database write. Any other
// error (database, handler) is returned as is and the runtime retries the delivery.
func (i *Inbox) HandleDelivery(ctx context.Context, d amqp.Delivery) error {
	env, err := i.validator.Decode(d.Body)
	if err != nil {
		i.metrics.invalid.Inc()
		i.logger.LogAttrs(ctx, slog.LevelWarn, "event rejected: it does not satisfy the contract",
			slog.String("message_id", d.MessageID), slog.String("type", d.Type), slog.Any("error", err))
		return fmt.Errorf("inbox %s: message %q: %w: %w", i.consumer, d.MessageID, amqp.ErrPermanent, err)
	}
	log := i.eventLogger(env)
	duplicate, err := i.Process(ctx, env)
	switch {
	case errors.Is(err, ErrNoHandler) || errors.Is(err, ErrNoEventID):
		i.metrics.invalid.Inc()
		log.LogAttrs(ctx, slog.LevelWarn, "event rejected: it cannot be processed", slog.Any("error", err))
		return fmt.Errorf("%w: %w", amqp.ErrPermanent, err)
	case err != nil:
		log.LogAttrs(ctx, slog.LevelWarn, "event failed; it will be retried",
			slog.String("event_name", env.EventName), slog.Int("attempt", d.Attempt), slog.Any("error", err))
		return err
	case duplicate:
		log.LogAttrs(ctx, slog.LevelInfo, "duplicate event skipped",
			slog.String("event_name", env.EventName), slog.Int("attempt", d.Attempt), slog.Bool("redelivered", d.Redelivered))
	default:
		log.LogAttrs(ctx, slog.LevelDebug, "event processed", slog.String("event_name", env.EventName))
	}
	return nil
}
