package amqp

import (
	"context"
	"log/slog"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/backoff"
)

// Headers a Consumer adds to the copy of a delivery it dead-letters
// (ConsumerConfig.DeadLetterQueue). The attempt count goes in
// ConsumerConfig.AttemptHeader, "x-attempt" by default.
const (
	// HeaderLastError is the text of the handler's last error, cut to
	// MaxLastErrorBytes.
	HeaderLastError = "x-last-error"
	// HeaderDeadLetteredAt is when the copy was made, RFC 3339 in UTC with
	// milliseconds (DeadLetterTimeFormat).
	HeaderDeadLetteredAt = "x-dead-lettered-at"
	// HeaderAttempt is the default ConsumerConfig.AttemptHeader.
	HeaderAttempt = "x-attempt"
)

// DeadLetterTimeFormat is the layout of HeaderDeadLetteredAt.
const DeadLetterTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// MaxLastErrorBytes bounds HeaderLastError and DeadLetter.Reason (bytes).
const MaxLastErrorBytes = 2048

// DeadLetter is a delivery a Consumer is about to dead-letter, as given to
// ConsumerConfig.OnDeadLetter.
type DeadLetter struct {
	Delivery Delivery
	// Reason is the handler's error text, at most MaxLastErrorBytes bytes.
	Reason string
	// Attempts is how often the delivery was handled (its attempt number).
	Attempts int
	// At is the time written to HeaderDeadLetteredAt, in UTC, whole milliseconds.
	At time.Time
}

// deadLetter settles a delivery that has failed for good (docs/architecture.md,
// step 5 of the flow): it records the dead letter (OnDeadLetter), publishes a
// copy carrying why to DeadLetterQueue, waits for the confirm and only then
// acks d. A failed record or publish is not the message's fault (the database
// or broker is in trouble): d goes back to its queue after the first retry
// delay and will be dead-lettered on its next delivery.
func (c *Consumer) deadLetter(ctx context.Context, log *slog.Logger, d *amqp091.Delivery, attempt int, cause error) {
	dl := DeadLetter{
		Delivery: Delivery{
			Body: d.Body, MessageID: d.MessageId, Type: d.Type, RoutingKey: d.RoutingKey,
			CorrelationID: d.CorrelationId, Timestamp: d.Timestamp, Headers: d.Headers,
			Attempt: attempt, Redelivered: d.Redelivered, ContentType: d.ContentType,
			Origin: OriginOf(c.cfg.Queue, d.Exchange, d.UserId, d.Headers),
		},
		Reason:   cut(cause.Error(), MaxLastErrorBytes),
		Attempts: attempt,
		At:       time.Now().UTC().Truncate(time.Millisecond),
	}
	requeue := func(msg string, err error) {
		delay := time.Second
		if len(c.cfg.RetryDelays) > 0 {
			delay = c.cfg.RetryDelays[0]
		}
		log.ErrorContext(ctx, msg+"; requeueing after a delay", slog.Any("error", cause), slog.Any("dead_letter_error", err),
			slog.Duration("delay", delay))
		_ = backoff.Sleep(ctx, delay)
		settle(ctx, log, "nack", d.Nack(false, true))
	}
	if c.cfg.OnDeadLetter != nil {
		if err := c.cfg.OnDeadLetter(ctx, dl); err != nil {
			requeue("recording the dead letter failed", err)
			return
		}
	}
	msg := retryCopy(d, c.cfg.Queue, c.cfg.AttemptHeader, attempt)
	msg.Headers[HeaderLastError] = dl.Reason
	msg.Headers[HeaderDeadLetteredAt] = dl.At.Format(DeadLetterTimeFormat)
	if err := c.publishCopy(ctx, c.cfg.DeadLetterQueue, msg); err != nil {
		requeue("publishing to the dead-letter queue failed", err)
		return
	}
	log.ErrorContext(ctx, "dead-lettered", slog.Any("error", cause), slog.String("dead_letter_queue", c.cfg.DeadLetterQueue))
	c.metrics.deadLettered.Inc()
	settle(ctx, log, "ack", ackAlone(d))
}

// cut returns s cut to at most n bytes, on a UTF-8 boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
