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
// it (docs/architecture.md rule 3: commit, then ack). An error that Permanent reports
// is returned wrapping amqp.ErrPermanent, so the delivery goes to the dead-letter
// queue at once: a body that does not decode or fails its schema (which includes an
// event_id that is not a UUID v7) or an event with no registered Handler, without any
// database write, and an event_id processed before with another content (a
// *ConflictError), without any effect. Any other error (database, handler) is
// returned as is and the runtime retries the delivery.
func (i *Inbox) HandleDelivery(ctx context.Context, d amqp.Delivery) error {
	env, err := i.validator.Decode(d.Body)
	if err != nil {
		i.consumer.metrics.invalid.Inc()
		i.logger.LogAttrs(ctx, slog.LevelWarn, "event rejected: it does not satisfy the contract",
			slog.String("message_id", d.MessageID), slog.String("type", d.Type), slog.Any("error", err))
		return fmt.Errorf("inbox %s: message %q: %w: %w", i.consumer.name, d.MessageID, amqp.ErrPermanent, err)
	}
	log := i.eventLogger(env)
	duplicate, err := i.Process(ctx, env)
	switch {
	case errors.Is(err, ErrConflict):
		// Counted and logged with both hashes by the Consumer.
		return fmt.Errorf("%w: %w", amqp.ErrPermanent, err)
	case Permanent(err):
		i.consumer.metrics.invalid.Inc()
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
