package amqp

import (
	"runtime"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// acker settles the deliveries of one channel, acknowledging them in runs:
// an ack marks its delivery done, and the contiguous run of done deliveries
// from the oldest unsettled one is acknowledged with one basic.ack
// (multiple=true) naming its last acked delivery tag (a rejected one is no
// longer the broker's to acknowledge, and it refuses to be named). An ack is therefore never sent
// past a delivery that is still being handled, or that was left unsettled
// (a dependency was unavailable): such a delivery, and every one after it,
// goes back to the queue when the channel closes, to be delivered again
// (docs/architecture.md, rule 3: at least once, the inbox skips the copy).
// Nacks and rejects are sent at once, each for its own delivery, and so is
// the ack of a delivery whose content now lives in another queue (a retry or
// dead-letter copy, ackAlone): its redelivery would not reach the inbox but
// be copied a second time.
//
// Many acks that become due together (the deliveries of one group commit)
// go out as one frame: the goroutine that sends first yields once, so the
// others woken with it mark their deliveries, and keeps sending until no
// newer run is due, while the others only mark their delivery and return.
// A lone delivery is acked at once. The broker sees one ack frame
// per run instead of one per delivery (for a quorum queue, one settle
// command in its log).
//
// Delivery tags of a channel start at 1 and grow by one per delivery; every
// delivery of the channel must pass through the acker's Acknowledger.
type acker struct {
	ch *amqp091.Channel

	mu      sync.Mutex
	next    uint64          // oldest delivery tag not yet settled
	done    map[uint64]bool // settled tags above next: true acked, false nacked or rejected
	due     uint64          // highest acked tag below next
	sent    uint64          // highest tag covered by a sent ack
	sending bool            // a goroutine is sending acks
}

func newAcker(ch *amqp091.Channel) *acker {
	return &acker{ch: ch, next: 1, done: make(map[uint64]bool)}
}

// settled marks tag settled (acked or not) and advances next over the
// contiguous run, and due to its last acked tag; a.mu is held. A multiple
// ack names an acked tag: the broker refuses one that names a delivery it no
// longer holds as unacknowledged (a rejected one).
func (a *acker) settled(tag uint64, acked bool) {
	if tag < a.next {
		return
	}
	a.done[tag] = acked
	for {
		acked, ok := a.done[a.next]
		if !ok {
			return
		}
		if acked {
			a.due = a.next
		}
		delete(a.done, a.next)
		a.next++
	}
}

// Ack marks tag acknowledged and sends the acks that are due, unless another
// goroutine is sending them. It returns the error of the ack frame that
// covered tag when this call sent it (the channel is gone: the broker
// delivers the message again), nil otherwise. multiple is not used: the
// acker decides which runs are acknowledged together.
func (a *acker) Ack(tag uint64, _ bool) error {
	a.mu.Lock()
	a.settled(tag, true)
	return a.flush(tag)
}

// Nack sends basic.nack for tag alone, then marks it settled (so no later
// multiple ack covers it before its nack went out) and sends the acks that
// became due.
func (a *acker) Nack(tag uint64, _ bool, requeue bool) error {
	err := a.ch.Nack(tag, false, requeue)
	a.mu.Lock()
	a.settled(tag, false)
	_ = a.flush(0)
	return err
}

// ackAlone sends basic.ack for tag alone, at once, then marks it settled as
// Nack does, so that no later multiple ack names it.
func (a *acker) ackAlone(tag uint64) error {
	err := a.ch.Ack(tag, false)
	a.mu.Lock()
	a.settled(tag, false)
	_ = a.flush(0)
	return err
}

// ackAlone acknowledges d at once and by itself: for a delivery copied to a
// retry or dead-letter queue, which must not come back and be copied again
// if the channel closes while an older delivery is still being handled.
func ackAlone(d *amqp091.Delivery) error {
	if a, ok := d.Acknowledger.(*acker); ok {
		return a.ackAlone(d.DeliveryTag)
	}
	return d.Ack(false)
}

// Reject sends basic.reject for tag, then marks it settled, as Nack.
func (a *acker) Reject(tag uint64, requeue bool) error {
	err := a.ch.Reject(tag, requeue)
	a.mu.Lock()
	a.settled(tag, false)
	_ = a.flush(0)
	return err
}

// flush sends one ack (multiple) for the run that is due, and again while
// a newer one became due meanwhile, unless another goroutine is sending.
// a.mu is held on entry and released on return. It returns the error of a
// frame that covered tag.
func (a *acker) flush(tag uint64) error {
	if a.sending {
		a.mu.Unlock()
		return nil
	}
	a.sending = true
	// Let the goroutines woken with this one (the other members of a group
	// commit) mark their deliveries first: one ack then covers them all.
	a.mu.Unlock()
	runtime.Gosched()
	a.mu.Lock()
	var err error
	for a.due > a.sent {
		upTo := a.due
		a.mu.Unlock()
		serr := a.ch.Ack(upTo, true)
		a.mu.Lock()
		a.sent = upTo
		if serr != nil && tag != 0 && tag <= upTo && err == nil {
			err = serr
		}
	}
	a.sending = false
	a.mu.Unlock()
	return err
}
