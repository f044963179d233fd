package dlq

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/amqp"
)

// Message is a dead letter's message: the copy in the dead-letter queue, or the one
// its record keeps.
type Message struct {
	Identity
	Delivery       amqp091.Delivery
	Reason         string    // x-last-error, or the record's reason
	Attempts       int       // x-attempt, or the record's attempts
	DeadLetteredAt time.Time // x-dead-lettered-at, else the AMQP timestamp; or the record's time
}

func (m *Message) matches(id string) bool {
	return id != "" && (id == m.Key || id == m.Delivery.MessageId || (m.EventID != uuid.Nil && strings.EqualFold(id, m.EventID.String())))
}

func newMessage(d amqp091.Delivery) *Message {
	m := &Message{Identity: Identify(d.Body, d.MessageId, d.Type), Delivery: d}
	if s, ok := d.Headers[amqp.HeaderLastError].(string); ok {
		m.Reason = s
	} else if d.Headers["x-first-death-reason"] != nil {
		m.Reason = fmt.Sprintf("rejected by the consumer (%v), no x-last-error", d.Headers["x-first-death-reason"])
	}
	m.Attempts = amqp.AttemptOf(d.Headers[amqp.HeaderAttempt])
	if s, ok := d.Headers[amqp.HeaderDeadLetteredAt].(string); ok {
		m.DeadLetteredAt, _ = time.Parse(amqp.DeadLetterTimeFormat, s)
	}
	if m.DeadLetteredAt.IsZero() {
		m.DeadLetteredAt = d.Timestamp
	}
	return m
}

// copies are the messages one scan of the dead-letter queue saw.
type copies struct {
	byKey map[string][]*Message
	keys  []string // in queue order
	held  map[*Message]bool
}

// of returns the copies that id names (their key, message_id or event_id).
func (c *copies) of(id string) []*Message {
	if ms := c.byKey[id]; len(ms) > 0 {
		return ms
	}
	for _, k := range c.keys {
		if ms := c.byKey[k]; ms[0].matches(id) {
			return ms
		}
	}
	return nil
}

// scan takes each message that is in the dead-letter queue when it starts, once.
// A message hold accepts stays taken by this session, unacknowledged, until ack
// removes it or the session ends (the broker then puts it back); every other one is
// put back at the tail of the queue by a confirmed publish before its ack. It stops
// at the first error; unacked messages return to the queue when the connection
// closes. A message taken by another session meanwhile is not seen.
func (s *session) scan(ctx context.Context, hold func(m *Message) bool) (*copies, error) {
	c := &copies{byKey: map[string][]*Message{}, held: map[*Message]bool{}}
	q, err := s.ch.QueueDeclarePassive(s.cfg.DeadLetterQueue, true, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("dlq: queue %s: %w", s.cfg.DeadLetterQueue, err)
	}
	for range q.Messages {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, ok, err := s.ch.Get(s.cfg.DeadLetterQueue, false)
		if err != nil {
			return nil, fmt.Errorf("dlq: get from %s: %w", s.cfg.DeadLetterQueue, err)
		}
		if !ok {
			break // taken by someone else meanwhile
		}
		m := newMessage(d)
		if _, seen := c.byKey[m.Key]; !seen {
			c.keys = append(c.keys, m.Key)
		}
		c.byKey[m.Key] = append(c.byKey[m.Key], m)
		if hold != nil && hold(m) {
			c.held[m] = true
			continue
		}
		if err := s.publish(ctx, s.cfg.DeadLetterQueue, copyOf(d, s.cfg.Queue, false)); err != nil {
			return nil, err
		}
		if err := d.Ack(false); err != nil {
			return nil, fmt.Errorf("dlq: ack %s: %w", m.Key, err)
		}
	}
	return c, nil
}

// ack removes the held messages among ms from the dead-letter queue.
func (s *session) ack(c *copies, ms []*Message) error {
	for _, m := range ms {
		if !c.held[m] {
			continue
		}
		if err := m.Delivery.Ack(false); err != nil {
			return fmt.Errorf("dlq: ack %s: %w", m.Key, err)
		}
		delete(c.held, m)
	}
	return nil
}

// publish sends msg to queue (the service's queue or its dead-letter queue)
// through the queue's copies exchange (amqp.CopiesExchange), mandatory, and waits
// for the confirm (at most ConfirmTimeout).
func (s *session) publish(ctx context.Context, queue string, msg amqp091.Publishing) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
	defer cancel()
	dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, amqp.CopiesExchange(s.cfg.Queue), queue, true, false, msg)
	if err != nil {
		return fmt.Errorf("dlq: publish %s to %s: %w", msg.MessageId, queue, err)
	}
	acked, err := dc.WaitContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("dlq: publish %s to %s: no confirm: %w", msg.MessageId, queue, err)
	case !acked:
		return fmt.Errorf("dlq: publish %s to %s: nacked by the broker", msg.MessageId, queue)
	}
	select {
	case r := <-s.returns: // a return comes before its confirm
		return fmt.Errorf("dlq: publish %s to %s: returned: %s", r.MessageId, queue, r.ReplyText)
	default:
		return nil
	}
}

// copyOf is d, read from the dead-letter queue of queue or rebuilt from its record,
// as the consumer's own copies are made (amqp.CopyOf), without a per-message TTL. For
// a replay the dead-letter headers are removed, which resets the attempt count to 1.
func copyOf(d amqp091.Delivery, queue string, replay bool) amqp091.Publishing {
	msg := amqp.CopyOf(&d, queue)
	msg.Expiration = ""
	if replay {
		delete(msg.Headers, amqp.HeaderAttempt)
		delete(msg.Headers, amqp.HeaderLastError)
		delete(msg.Headers, amqp.HeaderDeadLetteredAt)
	}
	return msg
}
