package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Stream is one pipelined publishing session on a Publisher's channel:
// messages are sent in the order they are added, without waiting for
// confirms, and Wait reports the broker's confirms in that same order
// (docs/architecture.md, rule 2). Adding messages while earlier ones are
// still being confirmed keeps the broker busy with no gap between batches:
// the relay adds its next batch before it waits for the one before.
//
// A Stream holds its Publisher from Publisher.Stream until Close: other
// calls on the Publisher wait. It is used by one goroutine.
//
// The first message that fails (nack, return, timeout, blocked connection,
// closed channel or connection, end of ctx) ends the Stream: Wait reports it
// as a *PublishError, and no message is sent after it is seen. Messages
// added after the failing one may or may not have reached a queue, so
// callers publish them again (at least once, never lost). A 404 NOT_FOUND
// (the exchange was deleted) is repaired once per Stream, as in
// PublishBatch. No message of a Stream is sent after its deadline.
type Stream struct {
	p        *Publisher
	ctx      context.Context // the caller's
	callCtx  context.Context // ctx, bounded by the timeout
	cancel   context.CancelFunc
	timeout  time.Duration
	deadline time.Time
	bounded  bool
	repaired bool

	mu      sync.Mutex
	msgs    []entry                         // every message added, in order
	sent    []*amqp091.DeferredConfirmation // of msgs[:len(sent)], on the current channel
	sendErr error                           // why the sender stopped, once stopped
	stopped bool                            // the current sender has returned
	gen     int                             // the current sender; older ones write nothing
	quit    chan struct{}                   // closed to stop the current sender
	wake    chan struct{}                   // cap 1: more messages were added
	moved   chan struct{}                   // cap 1: the sender sent a message or stopped

	confirmed int   // length of the confirmed prefix
	failedAt  int   // index of the failing message, when err is set
	err       error // the failure that ended the Stream, without index
	closed    bool
}

// entry is one message ready to send.
type entry struct {
	key string
	msg amqp091.Publishing
}

// Stream opens a publishing session that sends nothing after timeout from
// now (<= 0: no bound but ctx) and stops when ctx ends. It waits, within
// that bound, while the broker blocks the connection and for a channel;
// when either fails, the failure is reported by the first Wait. Close the
// Stream when done: it releases the Publisher.
func (p *Publisher) Stream(ctx context.Context, timeout time.Duration) *Stream {
	p.mu.Lock()
	s := &Stream{p: p, ctx: ctx, callCtx: ctx, timeout: timeout, cancel: func() {},
		wake: make(chan struct{}, 1), moved: make(chan struct{}, 1)}
	if timeout > 0 {
		s.callCtx, s.cancel = context.WithTimeout(ctx, timeout)
		s.deadline, s.bounded = s.callCtx.Deadline()
	}
	// A blocked connection reads nothing: sending would only fill the socket.
	if err := p.conn.waitUnblocked(s.callCtx); err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
			blocked := p.conn.blockedErr()
			if blocked == nil { // unblocked just now
				blocked = ErrBlocked
			}
			err = fmt.Errorf("waited %v: %w", timeout, blocked)
		}
		s.failAt(0, err)
		return s
	}
	if err := s.start(0); err != nil {
		if s.callCtx.Err() != nil && !errors.Is(err, ErrClosed) {
			err = s.ended(fmt.Errorf("open channel: %w", ErrConfirmTimeout))
		}
		s.failAt(0, err)
	}
	return s
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
// channel or connection, the end of ctx, or a message AMQP cannot carry (a
// short string over 255 bytes: never sent, and the channel stays open).
// Messages after the prefix may or may not have reached a queue, so callers
// publish them again (at least once, never lost).
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
	if len(msgs) == 0 {
		return 0, nil
	}
	s := p.Stream(ctx, confirmTimeout)
	defer s.Close()
	s.Send(msgs)
	return s.Wait(len(msgs))
}

// Send adds msgs to the Stream; they are sent after the messages added
// before, without waiting. It does not block. Messages added after the
// Stream failed or was closed are not sent. Each carries the connection's
// user as its user_id, which the broker checks (it refuses any other), so a
// consumer can tell who published it (docs/architecture.md, rule 8).
func (s *Stream) Send(msgs []Message) {
	now := time.Now().UTC()
	user := s.p.conn.nodes.User()
	s.mu.Lock()
	for i := range msgs {
		m := &msgs[i]
		ts := m.Timestamp
		if ts.IsZero() {
			ts = now
		}
		s.msgs = append(s.msgs, entry{m.RoutingKey, amqp091.Publishing{
			Headers:       m.Headers,
			ContentType:   "application/json",
			DeliveryMode:  amqp091.Persistent,
			MessageId:     m.MessageID,
			CorrelationId: m.CorrelationID,
			Timestamp:     ts,
			Type:          m.Type,
			UserId:        user,
			Body:          m.Body,
		}})
	}
	s.mu.Unlock()
	signal(s.wake)
}

// sendRaw adds one prepared message for key.
func (s *Stream) sendRaw(key string, msg amqp091.Publishing) {
	s.mu.Lock()
	s.msgs = append(s.msgs, entry{key, msg})
	s.mu.Unlock()
	signal(s.wake)
}

// Wait waits until the broker has confirmed the first n messages added to
// the Stream, or one of them failed, and returns the length of the
// confirmed prefix (of all messages added, not only of the last Send).
// When it is below n, err is a *PublishError naming the first message not
// confirmed (Index counts from the Stream's first message); the Stream has
// then ended and every later Wait returns the same. n beyond the messages
// added is cut to their number.
func (s *Stream) Wait(n int) (confirmed int, err error) {
	s.mu.Lock()
	n = min(n, len(s.msgs))
	s.mu.Unlock()
	for s.err == nil && s.confirmed < n {
		s.confirmNext()
	}
	if s.err != nil && s.confirmed < n {
		return s.confirmed, s.publishError()
	}
	return s.confirmed, nil
}

// confirmNext waits for the message at s.confirmed to be sent and then
// confirmed, and either counts it or records the Stream's failure.
func (s *Stream) confirmNext() {
	i := s.confirmed
	returns, moved := s.p.returns, s.moved
	var confirmed <-chan struct{} // nil until message i is sent
	var dc *amqp091.DeferredConfirmation
	for {
		if dc == nil {
			s.mu.Lock()
			stopped, sendErr := s.stopped, s.sendErr
			if i < len(s.sent) {
				dc = s.sent[i]
			}
			s.mu.Unlock()
			switch {
			case dc != nil:
				confirmed, moved = dc.Done(), nil
			case stopped && sendErr == errPastDeadline:
				s.fail(i, s.ended(ErrConfirmTimeout))
				return
			case stopped:
				s.fail(i, s.p.closedErr(sendErr))
				return
			}
		}
		select {
		case <-moved:
		case <-confirmed:
			// The broker sends basic.return before the ack of the same
			// message and the library hands it over before resolving the
			// confirm, so any return for message i is in the buffer now.
			s.p.drainReturns()
			switch reason, returned := s.p.returned[s.msgs[i].msg.MessageId]; {
			case !dc.Acked():
				s.fail(i, s.p.closedErr(ErrNacked))
			case returned:
				s.fail(i, fmt.Errorf("%w: %s", ErrReturned, reason))
			default:
				s.confirmed++
			}
			return
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			s.p.recordReturn(r)
		case <-s.callCtx.Done():
			s.fail(i, s.ended(ErrConfirmTimeout))
			return
		}
	}
}

// Close stops the Stream and releases its Publisher. After a failure, or
// with messages sent and not yet confirmed, the channel is discarded, so
// the next call opens a new one. Close is idempotent.
func (s *Stream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.stopSender()
	s.cancel()
	s.mu.Lock()
	unconfirmed := len(s.sent) > s.confirmed
	s.mu.Unlock()
	if s.err != nil || unconfirmed {
		// A channel is used again only when all it sent was confirmed:
		// a late confirm or return must not be taken for a later message's.
		s.p.discard()
	}
	s.p.mu.Unlock()
}

// start opens the channel if needed and starts a sender that sends the
// messages from index from on.
func (s *Stream) start(from int) error {
	p := s.p
	ch, err := p.channel(s.callCtx)
	if err != nil {
		return err
	}
	clear(p.returned)
	p.drainReturns()
	s.mu.Lock()
	s.gen++
	gen, quit := s.gen, make(chan struct{})
	s.quit, s.stopped, s.sendErr = quit, false, nil
	s.sent = s.sent[:from]
	s.mu.Unlock()
	if !p.conn.background(func() { s.send(ch, gen, quit, from) }) {
		return ErrClosed
	}
	return nil
}

// send is the sender: it publishes the Stream's messages from index i on,
// in order, as they are added, until quit is closed, a publish fails or the
// deadline passes. It runs in a goroutine of its own because a write to a
// connection the broker has just blocked can wait until the alarm clears;
// Wait never outlasts the deadline, and once the Stream is closed the
// sender sends nothing more (its last write ends when the broker reads
// again or the connection closes).
//
// It reads the clock before each message: a process that was frozen
// (SIGSTOP, a stalled VM) and wakes past the deadline sends nothing more,
// even before Wait has noticed the deadline. A caller can rely on it: no
// message of a Stream leaves after its deadline (a relay's batch,
// docs/architecture.md, rule 2).
func (s *Stream) send(ch *amqp091.Channel, gen int, quit chan struct{}, i int) {
	stop := func(err error) {
		s.mu.Lock()
		if s.gen == gen {
			s.stopped, s.sendErr = true, err
		}
		s.mu.Unlock()
		signal(s.moved)
	}
	for {
		s.mu.Lock()
		for i >= len(s.msgs) {
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-quit:
				stop(nil)
				return
			}
			s.mu.Lock()
		}
		e := s.msgs[i]
		s.mu.Unlock()
		select {
		case <-quit:
			stop(nil)
			return
		default:
		}
		if s.bounded && !time.Now().Before(s.deadline) {
			stop(errPastDeadline)
			return
		}
		if err := unencodable(e.key, e.msg); err != nil {
			stop(err) // the broker is never asked, the channel stays open
			return
		}
		dc, err := ch.PublishWithDeferredConfirm(s.p.exchange, e.key, true, false, e.msg)
		if err != nil {
			stop(err)
			return
		}
		s.mu.Lock()
		if s.gen == gen {
			s.sent = append(s.sent, dc)
		}
		s.mu.Unlock()
		signal(s.moved)
		i++
	}
}

// stopSender tells the current sender to send nothing more.
func (s *Stream) stopSender() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.quit != nil {
		close(s.quit)
		s.quit = nil
	}
}

// fail ends the Stream at message i with err, unless err is the first 404
// NOT_FOUND of the Stream and time is left: then it declares the topology
// again and sends the unconfirmed rest once more on a new channel.
func (s *Stream) fail(i int, err error) {
	s.stopSender()
	if isNotFound(err) && !s.repaired && s.callCtx.Err() == nil {
		s.repaired = true
		s.p.discard()
		if derr := s.p.conn.Redeclare(s.callCtx); derr != nil {
			s.failAt(i, fmt.Errorf("%w (declaring the topology again failed: %w)", err, derr))
			return
		}
		s.p.conn.logger.WarnContext(s.ctx, "amqp exchange was missing; declared the topology again and publishing again",
			slog.String("exchange", s.p.exchange), slog.Any("error", err))
		if serr := s.start(i); serr != nil {
			s.failAt(i, serr)
		}
		return
	}
	s.failAt(i, err)
}

// failAt records the Stream's failure at message i.
func (s *Stream) failAt(i int, err error) {
	s.stopSender()
	s.failedAt, s.err = i, err
}

// publishError names the failing message.
func (s *Stream) publishError() error {
	s.mu.Lock()
	id := s.msgs[s.failedAt].msg.MessageId
	s.mu.Unlock()
	return &PublishError{Index: s.failedAt, MessageID: id, Err: s.err}
}

// ended names why the Stream's time ended: the caller's ctx, or the
// timeout (with the broker's block, if any, which is then the likely
// cause).
func (s *Stream) ended(what error) error {
	if s.ctx.Err() != nil {
		return s.ctx.Err()
	}
	if blocked := s.p.conn.blockedErr(); blocked != nil {
		return fmt.Errorf("%w (%v): %w", what, s.timeout, blocked)
	}
	return fmt.Errorf("%w (%v)", what, s.timeout)
}

// signal wakes whoever waits on ch (cap 1) without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// maxShortstr is the most bytes an AMQP 0-9-1 short string holds.
const maxShortstr = 255

// unencodable returns an error that names the first short string of a
// message that AMQP 0-9-1 cannot carry (over 255 bytes): its routing key,
// message_id, correlation_id, type or a header's name; nil when there is
// none. Such a message is never sent: the library would fail the frame and
// close the connection, which looks like an outage, and every retry would do
// the same.
func unencodable(key string, m amqp091.Publishing) error {
	for _, f := range []struct{ name, value string }{
		{"routing key", key}, {"message_id", m.MessageId}, {"correlation_id", m.CorrelationId}, {"type", m.Type},
	} {
		if len(f.value) > maxShortstr {
			return fmt.Errorf("cannot be sent: its %s is %d bytes, more than AMQP's %d", f.name, len(f.value), maxShortstr)
		}
	}
	for name := range m.Headers {
		if len(name) > maxShortstr {
			return fmt.Errorf("cannot be sent: a header name is %d bytes, more than AMQP's %d", len(name), maxShortstr)
		}
	}
	return nil
}
