package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"

	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/logging"
)

// ErrPermanent marks an error that no retry can fix: a handler wraps it,
// fmt.Errorf("%w: %w", inbox.ErrPermanent, err), and the consumer runtime
// dead-letters the event at once (docs/architecture.md, rule 3); Permanent reports
// it. It is amqp.ErrPermanent, the one sentinel the runtime checks, under the
// inbox's name, so that a handler never needs the broker package.
var ErrPermanent = amqp.ErrPermanent

// HandleDelivery is an amqp.HandlerFunc that decodes d.Body as an event envelope,
// validates it against the contract (contracts.Validator.Decode) and runs Process,
// which decodes the payload for the event's handlers: the body is parsed once.
//
// It returns nil when the event was processed or was a duplicate, so the runtime acks
// it (docs/architecture.md, rule 3: commit, then ack). An error that can never succeed
// wraps ErrPermanent, so the delivery is dead-lettered at once: a content_type that
// is set and is not application/json, a body that does not decode or fails its
// schema (which includes an event_id that is not a UUID v7), a message_id that is
// set and differs from the envelope's event_id, a type that is set and differs from
// its event_name (CheckDelivery), a delivery not from its producer's relay
// through app.events (WithPublishers), an event with no registered
// handler, or a payload that does not decode into its handlers' type, all without
// any database write; an event_id processed before with another content (a
// *ConflictError), without any effect; and a handler's error that wraps
// ErrPermanent. A database that is unreachable, shutting down or refusing work (see
// unavailable) is not the event's fault, and neither is one that does not answer
// within the Inbox's timeout (WithTimeout, default DefaultTimeout): the error then
// wraps amqp.ErrUnavailable and the runtime pauses without counting an attempt. Any
// other error (a handler's) is returned wrapped as it is and the runtime retries
// the delivery.
//
// HandleDelivery logs no failure: the runtime logs each one once, with what it did
// about it, and the error of a decoded event carries its event_id, event_name and
// correlation_id as log attributes (logging.ErrorAttrs).
func (i *Inbox) HandleDelivery(ctx context.Context, d amqp.Delivery) error {
	env, err := CheckDelivery(i.validator, d.ContentType, d.MessageID, d.Type, d.Body)
	if err != nil {
		i.consumer.metrics.invalid.Inc()
		return fmt.Errorf("inbox %s: message %q: %w: %w", i.consumer.name, d.MessageID, ErrPermanent, err)
	}
	if i.publishers != nil {
		if err := i.publishers.Check(env.EventName, d.Origin); err != nil {
			i.consumer.metrics.unauthenticated.Inc()
			return &eventError{env: env, err: permanent(err)}
		}
	}
	dbCtx, cancel := context.WithTimeout(ctx, i.timeout)
	duplicate, err := i.Process(dbCtx, env)
	cancel()
	switch {
	case errors.Is(err, ErrConflict):
		// Counted by the Consumer, logged once by the consumer runtime.
		return &eventError{env: env, err: permanent(err)}
	case Permanent(err):
		i.consumer.metrics.invalid.Inc()
		return &eventError{env: env, err: permanent(err)}
	case err != nil && unavailable(err):
		return &eventError{env: env, err: fmt.Errorf("%w: %w", amqp.ErrUnavailable, err)}
	case err != nil:
		return &eventError{env: env, err: err}
	case duplicate:
		i.eventLogger(metaOf(env)).LogAttrs(ctx, slog.LevelInfo, "duplicate event skipped",
			slog.String("event_name", env.EventName), slog.Int("attempt", d.Attempt), slog.Bool("redelivered", d.Redelivered))
	case i.logger.Enabled(ctx, slog.LevelDebug):
		// Checked first: the event's logger costs allocations on every delivery.
		i.eventLogger(metaOf(env)).LogAttrs(ctx, slog.LevelDebug, "event processed", slog.String("event_name", env.EventName))
	}
	return nil
}

// permanent returns err, a Permanent one, wrapping ErrPermanent for the runtime.
func permanent(err error) error {
	if errors.Is(err, ErrPermanent) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// eventError is a failure of one decoded event: its error, with the event's
// event_id, event_name and correlation_id as log attributes
// (logging.AttrError), so the consumer runtime logs the failure once and names
// the event.
type eventError struct {
	env contracts.Envelope
	err error
}

func (e *eventError) Error() string { return e.err.Error() }
func (e *eventError) Unwrap() error { return e.err }

// LogAttrs returns the event's event_id, event_name and correlation_id.
func (e *eventError) LogAttrs() []slog.Attr {
	return []slog.Attr{
		slog.String(logging.KeyEventID, e.env.EventID.String()),
		slog.String("event_name", e.env.EventName),
		slog.String(logging.KeyCorrelationID, e.env.CorrelationID),
	}
}

// CheckDelivery decodes the body of a delivery with these AMQP properties as an
// event envelope and checks the delivery as HandleDelivery does before any
// database write: it returns an error naming the first of a content_type that is
// set and is not application/json (parameters such as charset allowed), a body
// that does not decode or fails its schema (v.Decode), a message_id that is set
// and differs from the envelope's event_id, and a type that is set and differs
// from its event_name (the relay sets both, so a copy that disagrees with its body
// was not published by a relay as it is); else the envelope. The dlq tool runs the
// same check (dlq.ContractCheck).
func CheckDelivery(v *contracts.Validator, contentType, messageID, typ string, body []byte) (contracts.Envelope, error) {
	if contentType != "" {
		if media, _, err := mime.ParseMediaType(contentType); err != nil || media != "application/json" {
			return contracts.Envelope{}, fmt.Errorf("content_type %q is not application/json", contentType)
		}
	}
	env, err := v.Decode(body)
	if err != nil {
		return contracts.Envelope{}, err
	}
	if id, err := uuid.Parse(messageID); messageID != "" && (err != nil || id != env.EventID) {
		return contracts.Envelope{}, fmt.Errorf("message_id %q differs from the envelope's event_id %s", messageID, env.EventID)
	}
	if typ != "" && typ != env.EventName {
		return contracts.Envelope{}, fmt.Errorf("type %q differs from the envelope's event_name %s", typ, env.EventName)
	}
	return env, nil
}
