package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"

	"github.com/google/uuid"

	"example.com/shop/platform/amqp"
)

// HandleDelivery is an amqp.HandlerFunc that decodes d.Body as an event envelope,
// validates it against the contract (contracts.Validator.Decode) and runs Process.
//
// It returns nil when the event was processed or was a duplicate, so the runtime acks
// it (docs/architecture.md, rule 3: commit, then ack). An error that can never succeed
// is returned wrapping amqp.ErrPermanent, so the delivery goes to the dead-letter queue
// at once: a content_type that is set and is not application/json, a body that does not
// decode or fails its schema (which includes an event_id that is not a UUID v7), a
// message_id that is set and differs from the envelope's event_id, or an event with no
// registered Handler, all without any database write; and an event_id processed before
// with another content (a *ConflictError), without any effect. A database that is
// unreachable, shutting down or refusing work (see unavailable) is not the event's
// fault: the error then wraps amqp.ErrUnavailable and the runtime pauses without
// counting an attempt. Any other error (a handler's) is
// returned as is and the runtime retries the delivery.
func (i *Inbox) HandleDelivery(ctx context.Context, d amqp.Delivery) error {
	if err := checkProperties(d); err != nil {
		i.consumer.metrics.invalid.Inc()
		i.logger.LogAttrs(ctx, slog.LevelWarn, "event rejected: its message properties are wrong",
			slog.String("message_id", d.MessageID), slog.String("type", d.Type), slog.Any("error", err))
		return fmt.Errorf("inbox %s: message %q: %w: %w", i.consumer.name, d.MessageID, amqp.ErrPermanent, err)
	}
	env, err := i.validator.Decode(d.Body)
	if err != nil {
		i.consumer.metrics.invalid.Inc()
		i.logger.LogAttrs(ctx, slog.LevelWarn, "event rejected: it does not satisfy the contract",
			slog.String("message_id", d.MessageID), slog.String("type", d.Type), slog.Any("error", err))
		return fmt.Errorf("inbox %s: message %q: %w: %w", i.consumer.name, d.MessageID, amqp.ErrPermanent, err)
	}
	if id, perr := uuid.Parse(d.MessageID); d.MessageID != "" && (perr != nil || id != env.EventID) {
		i.consumer.metrics.invalid.Inc()
		err := fmt.Errorf("message_id %q differs from the envelope's event_id %s", d.MessageID, env.EventID)
		i.logger.LogAttrs(ctx, slog.LevelWarn, "event rejected: its message_id is not its event_id",
			slog.String("message_id", d.MessageID), slog.String("type", d.Type), slog.Any("error", err))
		return fmt.Errorf("inbox %s: %w: %w", i.consumer.name, amqp.ErrPermanent, err)
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
	case err != nil && unavailable(err):
		log.LogAttrs(ctx, slog.LevelWarn, "database unavailable; the event waits in its queue",
			slog.String("event_name", env.EventName), slog.Any("error", err))
		return fmt.Errorf("%w: %w", amqp.ErrUnavailable, err)
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

// checkProperties refuses a delivery whose AMQP content_type is set and is not
// application/json (parameters such as charset allowed): its body is not an envelope.
func checkProperties(d amqp.Delivery) error {
	if d.ContentType == "" {
		return nil
	}
	if media, _, err := mime.ParseMediaType(d.ContentType); err != nil || media != "application/json" {
		return fmt.Errorf("content_type %q is not application/json", d.ContentType)
	}
	return nil
}
