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
	// RoutingKey is the event name (DESIGN.md "Messaging").
	RoutingKey string
	// MessageID is the event_id; it must be unique within a batch because
	// returned (unroutable) messages are matched by it.
	MessageID string
	// Type is the event name.
	Type string
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

// PublishError names the first message of a batch that was not confirmed.
// Err is ErrNacked, ErrReturned or ErrConfirmTimeout (wrapped), a channel
// or connection error, or the context's error.
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
// the mandatory flag, and reports what the broker confirmed (DESIGN.md
// rule 2: publish, wait for the confirm, only then mark as published).
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

// PublishBatch publishes msgs in order, pipelined: it sends every message
// without waiting, then waits for the broker's confirms in order.
// confirmTimeout bounds the whole call, including opening a channel when the
// connection is being re-established; <= 0 means no bound but ctx.
//
// confirmed is the length of the longest prefix of msgs that the broker
// acked and did not return; those messages are safely stored. When
// confirmed < len(msgs), err is a *PublishError naming msgs[confirmed]: a
// nack, a return, the timeout, a closed channel or connection (for example
// a missing exchange) or the end of ctx. Messages after the prefix may or
// may not have reached a queue, so callers publish them again (at least
// once, never lost).
//
// A publish itself cannot be interrupted: when the broker blocks publishers
// (memory or disk alarm) a call may wait in the socket write beyond
// confirmTimeout until the alarm clears or the connection drops.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message, confirmTimeout time.Duration) (confirmed int, err error) {
	now := time.Now().UTC()
	return p.publish(ctx, len(msgs), func(i int) (string, amqp091.Publishing) {
		m := &msgs[i]
		ts := m.Timestamp
		if ts.IsZero() {
			ts = now
		}
		return m.RoutingKey, amqp091.Publishing{
			Headers:      m.Headers,
			ContentType:  "application/json",
			DeliveryMode: amqp091.Persistent,
			MessageId:    m.MessageID,
			Timestamp:    ts,
			Type:         m.Type,
			Body:         m.Body,
		}
	}, confirmTimeout)
}

// PublishOne publishes msg and waits for its confirm: one round trip per
// message, the slow baseline that PublishBatch pipelines away. Errors are
// those of PublishBatch.
func (p *Publisher) PublishOne(ctx context.Context, msg Message, confirmTimeout time.Duration) error {
	_, err := p.PublishBatch(ctx, []Message{msg}, confirmTimeout)
	return err
}

// publishRaw publishes one prepared message to key and waits for its
// confirm; used by the consumer to move a delivery to a retry queue.
func (p *Publisher) publishRaw(ctx context.Context, key string, msg amqp091.Publishing, confirmTimeout time.Duration) error {
	_, err := p.publish(ctx, 1, func(int) (string, amqp091.Publishing) { return key, msg }, confirmTimeout)
	return err
}

// Close closes the channel. The Publisher can still be used afterwards; it
// then opens a new channel.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discard()
	return nil
}

func (p *Publisher) publish(ctx context.Context, n int, at func(int) (string, amqp091.Publishing), timeout time.Duration) (int, error) {
	if n == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	var deadline <-chan time.Time
	openCtx := ctx
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
		var cancel context.CancelFunc
		openCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	fail := func(i int, err error) (int, error) {
		p.discard()
		_, m := at(i)
		return i, &PublishError{Index: i, MessageID: m.MessageId, Err: err}
	}

	ch, err := p.channel(openCtx)
	if err != nil {
		return fail(0, err)
	}
	clear(p.returned)
	p.drainReturns()

	// Phase 1: send everything.
	pending := p.pending[:0]
	defer func() { clear(pending); p.pending = pending[:0] }()
	var sendErr error
	for i := range n {
		key, msg := at(i)
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, key, true, false, msg)
		if err != nil {
			sendErr = err
			break
		}
		pending = append(pending, dc)
		if len(p.returns) > 0 {
			p.drainReturns()
		}
	}

	// Phase 2: wait for the confirms in order.
	returns := p.returns
	for i, dc := range pending {
	wait:
		for {
			select {
			case <-dc.Done():
				break wait
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				p.recordReturn(r)
			case <-deadline:
				return fail(i, fmt.Errorf("%w (%v)", ErrConfirmTimeout, timeout))
			case <-ctx.Done():
				return fail(i, ctx.Err())
			}
		}
		// The broker sends basic.return before the ack of the same message
		// and the library hands it over before resolving the confirm, so
		// any return for message i is in the buffer now.
		p.drainReturns()
		_, msg := at(i)
		if !dc.Acked() {
			return fail(i, p.closedErr(ErrNacked))
		}
		if reason, ok := p.returned[msg.MessageId]; ok {
			return fail(i, fmt.Errorf("%w: %s", ErrReturned, reason))
		}
	}
	if sendErr != nil {
		return fail(len(pending), p.closedErr(sendErr))
	}
	return n, nil
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
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp confirm mode: %w", err)
	}
	p.ch = ch
	p.returns = ch.NotifyReturn(make(chan amqp091.Return, returnsBuffer))
	p.closes = ch.NotifyClose(make(chan *amqp091.Error, 1))
	return ch, nil
}

// discard closes the channel; the next call opens a new one.
func (p *Publisher) discard() {
	if p.ch == nil {
		return
	}
	_ = p.ch.Close()
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
