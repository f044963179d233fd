package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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
// nack, a return, the timeout, a blocked connection (ErrBlocked), a closed
// channel or connection or the end of ctx. Messages after the prefix may or
// may not have reached a queue, so callers publish them again (at least
// once, never lost).
//
// When the broker closes the channel with 404 NOT_FOUND (the exchange was
// deleted), the call declares the Connection's topology again (exchange,
// alternate exchange, unroutable queue, and the queues and bindings it
// names) and publishes the unconfirmed rest once more, within the same
// confirmTimeout.
//
// No call waits past confirmTimeout (or ctx): while the broker blocks the
// connection (memory or disk alarm) nothing is sent and the call fails with
// an error wrapping ErrBlocked and the broker's reason when the time is up;
// a block that starts mid-call makes it fail with ErrConfirmTimeout wrapped
// together with ErrBlocked. Writes and the channel's close left unfinished
// complete in the background when the broker reads again or the connection
// closes.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message, confirmTimeout time.Duration) (confirmed int, err error) {
	now := time.Now().UTC()
	return p.publishRepairing(ctx, len(msgs), func(i int) (string, amqp091.Publishing) {
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

// publishRaw publishes one prepared message to key and waits for its
// confirm; used by the consumer to move a delivery to a retry queue.
func (p *Publisher) publishRaw(ctx context.Context, key string, msg amqp091.Publishing, confirmTimeout time.Duration) error {
	_, err := p.publish(ctx, 1, func(int) (string, amqp091.Publishing) { return key, msg }, confirmTimeout)
	return err
}

// publishRepairing is publish, followed after a 404 NOT_FOUND (a missing
// exchange) by a declaration of the topology and one more publish of the
// unconfirmed rest, all within timeout.
func (p *Publisher) publishRepairing(ctx context.Context, n int, at func(int) (string, amqp091.Publishing), timeout time.Duration) (int, error) {
	start := time.Now()
	confirmed, err := p.publish(ctx, n, at, timeout)
	var pe *PublishError
	if err == nil || !isNotFound(err) || !errors.As(err, &pe) {
		return confirmed, err
	}
	left := time.Duration(0)
	rctx := ctx
	if timeout > 0 {
		if left = timeout - time.Since(start); left <= 0 {
			return confirmed, err
		}
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, left)
		defer cancel()
	}
	if derr := p.conn.Redeclare(rctx); derr != nil {
		pe.Err = fmt.Errorf("%w (declaring the topology again failed: %w)", pe.Err, derr)
		return confirmed, pe
	}
	p.conn.logger.WarnContext(ctx, "amqp exchange was missing; declared the topology again and publishing again",
		slog.String("exchange", p.exchange), slog.Any("error", err))
	more, err := p.publish(ctx, n-confirmed, func(i int) (string, amqp091.Publishing) { return at(confirmed + i) }, left)
	if errors.As(err, &pe) {
		pe.Index += confirmed
	}
	return confirmed + more, err
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

func (p *Publisher) publish(ctx context.Context, n int, at func(int) (string, amqp091.Publishing), timeout time.Duration) (int, error) {
	if n == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	callCtx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	fail := func(i int, err error) (int, error) {
		p.discard()
		_, m := at(i)
		return i, &PublishError{Index: i, MessageID: m.MessageId, Err: err}
	}
	// ended names why callCtx ended: the caller's ctx, or the timeout (with
	// the broker's block, if any, which is then the likely cause).
	ended := func(what error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if blocked := p.conn.blockedErr(); blocked != nil {
			return fmt.Errorf("%w (%v): %w", what, timeout, blocked)
		}
		return fmt.Errorf("%w (%v)", what, timeout)
	}

	// A blocked connection reads nothing: sending would only fill the socket.
	if err := p.conn.waitUnblocked(callCtx); err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
			blocked := p.conn.blockedErr()
			if blocked == nil { // unblocked just now
				blocked = ErrBlocked
			}
			err = fmt.Errorf("waited %v: %w", timeout, blocked)
		}
		return fail(0, err)
	}
	ch, err := p.channel(callCtx)
	if err != nil {
		if callCtx.Err() != nil && !errors.Is(err, ErrClosed) {
			err = ended(fmt.Errorf("open channel: %w", ErrConfirmTimeout))
		}
		return fail(0, err)
	}
	clear(p.returned)
	p.drainReturns()

	// The messages are sent by a goroutine of their own, because a write to
	// a connection the broker has just blocked can wait until the alarm
	// clears; the wait below never outlasts callCtx. Once this call has
	// returned the sender sends nothing more, and its last write ends when
	// the broker reads again or the connection closes.
	//
	// The sender also reads the clock before each message: a process that
	// was frozen (SIGSTOP, a stalled VM) and wakes past the call's deadline
	// sends nothing more, even before the wait below has noticed the
	// deadline. A caller can rely on it: no message of this call leaves
	// after its deadline (a relay's batch, docs/architecture.md, rule 2).
	deadline, bounded := callCtx.Deadline()
	sent := make(chan *amqp091.DeferredConfirmation, n)
	var (
		stop    atomic.Bool
		sendErr error // written before sent is closed
	)
	defer stop.Store(true)
	if !p.conn.background(func() {
		defer close(sent)
		for i := range n {
			if stop.Load() {
				return
			}
			if bounded && !time.Now().Before(deadline) {
				sendErr = errPastDeadline
				return
			}
			key, msg := at(i)
			dc, err := ch.PublishWithDeferredConfirm(p.exchange, key, true, false, msg)
			if err != nil {
				sendErr = err
				return
			}
			sent <- dc
		}
	}) {
		return fail(0, ErrClosed)
	}

	// Wait for each message to be sent, then for its confirm, in order.
	returns := p.returns
	for i := range n {
		var (
			dc        *amqp091.DeferredConfirmation
			next      = sent          // nil once message i is sent
			confirmed <-chan struct{} // nil until then
		)
	wait:
		for {
			select {
			case d, ok := <-next:
				if !ok {
					if sendErr == errPastDeadline {
						return fail(i, ended(ErrConfirmTimeout))
					}
					return fail(i, p.closedErr(sendErr))
				}
				dc, next, confirmed = d, nil, d.Done()
			case <-confirmed:
				break wait
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				p.recordReturn(r)
			case <-callCtx.Done():
				return fail(i, ended(ErrConfirmTimeout))
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
