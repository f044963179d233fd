package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Message is one event to publish. The AMQP message gets delivery mode
// persistent, content type application/json and these properties.
type Message struct {
	// RoutingKey is the event name (docs/architecture.md, "The flow").
	RoutingKey string
	// MessageID is the event_id; it must be unique within a batch because
	// returned (unroutable) messages are matched by it.
	MessageID string
	// Type is the event name.
	Type string
	// CorrelationID is sent as the correlation_id property when set: the
	// envelope's correlation_id.
	CorrelationID string
	// Body is the JSON envelope.
	Body []byte
	// Timestamp is sent with one-second resolution; zero means now.
	Timestamp time.Time
	// Headers are optional application headers.
	Headers amqp091.Table
}

// Reasons a publish fails, wrapped in a *PublishError (use errors.Is).
var (
	// ErrNacked means the broker refused the message (basic.nack).
	ErrNacked = errors.New("nacked by the broker")
	// ErrReturned means the broker could not route the mandatory message
	// to any queue (basic.return); it fails even if the broker acks it.
	ErrReturned = errors.New("returned unroutable by the broker")
	// ErrConfirmTimeout means the confirm did not arrive in time.
	ErrConfirmTimeout = errors.New("no confirm before the timeout")
)

// errPastDeadline stops a publish's sender that finds the call's deadline
// passed before it sends the next message.
var errPastDeadline = errors.New("the publish deadline passed before the message was sent")

// PublishError names the first message of a batch that was not confirmed.
// Err is ErrNacked, ErrReturned, ErrConfirmTimeout or ErrBlocked (wrapped;
// a timeout during a block wraps both), a channel or connection error, or
// the context's error.
type PublishError struct {
	Index     int    // position of the message in the batch
	MessageID string // its MessageID
	Err       error
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("publish message %s (batch index %d): %v", e.MessageID, e.Index, e.Err)
}

func (e *PublishError) Unwrap() error { return e.Err }

// returnsBuffer is the capacity of the basic.return listener. The library
// delivers returns from the connection's reader goroutine and gives up on a
// full listener after a few seconds, so the publisher drains it after every
// publish and while it waits for confirms.
const returnsBuffer = 256

// Publisher publishes to one exchange on its own confirm-mode channel with
// the mandatory flag, and reports what the broker confirmed (docs/architecture.md,
// rule 2: publish, wait for the confirm, only then mark as published). It is
// the platform's one publish-with-confirm helper, in three forms:
//
//   - Stream: a pipelined session (send without waiting, confirms in order,
//     the first failure ends it), which the outbox relay publishes through;
//   - PublishBatch: a Stream for one slice of Messages, confirmed as a whole;
//   - Publish: one prepared amqp091.Publishing to a routing key, for copies of
//     a delivery (retry and dead-letter copies, a dead letter sent back).
//
// Every form waits for publisher confirms and treats a returned (unroutable)
// message as a failure; none waits past its timeout, even while the broker
// blocks publishers (ErrBlocked).
//
// A Publisher is safe for concurrent use; calls are serialised on its one
// channel, so use several Publishers for parallel publishing. The channel is
// opened on first use and after any failed call is discarded and reopened
// on the next call, so a failure never leaks into the next batch.
type Publisher struct {
	conn     *Connection
	exchange string

	mu       sync.Mutex
	ch       *amqp091.Channel
	returns  chan amqp091.Return
	closes   chan *amqp091.Error
	returned map[string]string // message id -> reason, for the current batch
	pending  []*amqp091.DeferredConfirmation
}

// NewPublisher returns a Publisher for exchange ("" is the default
// exchange, whose routing keys are queue names). It opens no channel yet.
func NewPublisher(conn *Connection, exchange string) *Publisher {
	return &Publisher{conn: conn, exchange: exchange, returned: make(map[string]string)}
}

// Exchange returns the exchange the Publisher publishes to.
func (p *Publisher) Exchange() string { return p.exchange }

// Publish publishes one prepared message to routing key key (a queue name on
// the default exchange "") and waits for its confirm: the form for copies of
// a delivery that keep its properties and headers, such as a retry copy, a
// dead-letter copy or a dead letter sent back to its queue. It returns nil
// once the broker acked the message and did not return it, and otherwise a
// *PublishError (ErrNacked, ErrReturned, ErrConfirmTimeout, ErrBlocked, a
// closed channel or connection, or ctx's error). It sends nothing after
// confirmTimeout (<= 0: no bound but ctx) and repairs a deleted exchange
// once, as PublishBatch does.
func (p *Publisher) Publish(ctx context.Context, key string, msg amqp091.Publishing, confirmTimeout time.Duration) error {
	s := p.Stream(ctx, confirmTimeout)
	defer s.Close()
	s.sendRaw(key, msg)
	_, err := s.Wait(1)
	return err
}

// isNotFound reports the broker's 404 NOT_FOUND (a missing exchange or
// queue), which closes the channel.
func isNotFound(err error) bool {
	var amqpErr *amqp091.Error
	return errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound
}

// Close closes the channel. The Publisher can still be used afterwards; it
// then opens a new channel.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discard()
	return nil
}

// channel returns the open confirm-mode channel, opening one if needed.
func (p *Publisher) channel(ctx context.Context) (*amqp091.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	p.discard()
	ch, err := p.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.conn.await(ctx, func() error { return ch.Confirm(false) }); err != nil {
		p.conn.closeChannel(ch)
		return nil, fmt.Errorf("amqp confirm mode: %w", err)
	}
	p.ch = ch
	p.returns = ch.NotifyReturn(make(chan amqp091.Return, returnsBuffer))
	p.closes = ch.NotifyClose(make(chan *amqp091.Error, 1))
	return ch, nil
}

// discard closes the channel without waiting for the broker (see
// Connection.closeChannel); the next call opens a new one.
func (p *Publisher) discard() {
	if p.ch == nil {
		return
	}
	p.conn.closeChannel(p.ch)
	p.ch, p.returns, p.closes = nil, nil, nil
}

func (p *Publisher) drainReturns() {
	for {
		select {
		case r, ok := <-p.returns:
			if !ok {
				return
			}
			p.recordReturn(r)
		default:
			return
		}
	}
}

func (p *Publisher) recordReturn(r amqp091.Return) {
	p.returned[r.MessageId] = fmt.Sprintf("%d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
}

// closedErr prefers the channel's close reason (for example 404 NOT_FOUND
// for a missing exchange) over the generic fallback.
func (p *Publisher) closedErr(fallback error) error {
	select {
	case e, ok := <-p.closes:
		if ok && e != nil {
			return fmt.Errorf("channel closed: %w", e)
		}
		return fmt.Errorf("channel closed: %w", amqp091.ErrClosed)
	default:
	}
	if p.ch != nil && p.ch.IsClosed() {
		return fmt.Errorf("channel closed: %w", amqp091.ErrClosed)
	}
	return fallback
}
