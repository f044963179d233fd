package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// consumeRaw subscribes a plain channel to queue with manual acks and returns the
// channel and the first n deliveries.
func consumeRaw(t *testing.T, queue string, n int) (*amqp091.Channel, []amqp091.Delivery) {
	t.Helper()
	ch := rawChannel(t)
	if err := ch.Qos(n, 0, false); err != nil {
		t.Fatal(err)
	}
	in, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds := make([]amqp091.Delivery, 0, n)
	timeout := time.After(10 * time.Second)
	for len(ds) < n {
		select {
		case d := <-in:
			ds = append(ds, d)
		case <-timeout:
			t.Fatalf("%d of %d deliveries", len(ds), n)
		}
	}
	return ch, ds
}

// The acker acknowledges only the contiguous run of settled deliveries: while the
// oldest delivery is unsettled (its handler still runs, or it was left for the
// broker to requeue) no later one is acknowledged, so closing the channel then (a
// crash) brings every one of them back, committed or not; a rejected delivery in
// the run is not named by the multiple ack, which the broker would refuse.
func TestAckerNeverAcksPastAnUnsettledDelivery(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	queue := topo.Queues[0].Name
	publishAll(t, conn, topo.Exchange, messages(10, "run"))

	ch, ds := consumeRaw(t, queue, 10)
	a := newAcker(ch)
	for _, d := range ds[1:] { // everything but the oldest
		var err error
		if d.MessageId == "run-4" {
			err = a.Reject(d.DeliveryTag, false) // to the dead-letter queue
		} else {
			err = a.Ack(d.DeliveryTag, false)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if a.sent != 0 || a.next != 1 {
		t.Fatalf("sent up to %d, next %d; want nothing sent while delivery 1 is unsettled", a.sent, a.next)
	}
	_ = ch.Close() // as a crash would: the eight acked but unsent deliveries come back, and the oldest
	eventually(t, 10*time.Second, "9 messages back in the queue", func() bool { return readyMessages(t, queue) == 9 })

	// Again, now settling the oldest last and ending the run on a reject: one
	// multiple ack names the last acked delivery, and the channel stays open.
	ch, ds = consumeRaw(t, queue, 9)
	a = newAcker(ch)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	for n := len(ds) - 1; n >= 0; n-- {
		var err error
		if n == len(ds)-1 {
			err = a.Reject(ds[n].DeliveryTag, false)
		} else {
			err = a.Ack(ds[n].DeliveryTag, false)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if a.next != ds[len(ds)-1].DeliveryTag+1 || a.sent != ds[len(ds)-2].DeliveryTag {
		t.Fatalf("next %d, sent up to %d; want every delivery settled and the last acked one sent", a.next, a.sent)
	}
	select {
	case err := <-closed:
		t.Fatalf("the broker closed the channel: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	_ = ch.Close()
	if n := readyMessages(t, queue); n != 0 {
		t.Errorf("%d messages back in the queue after every delivery was settled, want 0", n)
	}
}

// A delivery copied to a retry or dead-letter queue is acknowledged at once,
// by itself, even while an older delivery is unsettled: when the channel then
// closes it does not come back (to be copied again), the others do; and a
// later multiple ack does not name it, so the channel stays open.
func TestAckerAcksACopiedDeliveryAtOnce(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	conn := dialTest(t, topo)
	queue := topo.Queues[0].Name
	publishAll(t, conn, topo.Exchange, messages(4, "copied"))

	ch, ds := consumeRaw(t, queue, 4)
	a := newAcker(ch)
	for _, d := range ds {
		d.Acknowledger = a
	}
	// ds[0] is still being handled; ds[1] was dead-lettered, ds[2] handled.
	if err := ackAlone(&ds[1]); err != nil {
		t.Fatal(err)
	}
	if err := a.Ack(ds[2].DeliveryTag, false); err != nil {
		t.Fatal(err)
	}
	_ = ch.Close()
	eventually(t, 10*time.Second, "3 messages back in the queue", func() bool { return readyMessages(t, queue) == 3 })

	ch, ds = consumeRaw(t, queue, 3)
	for _, d := range ds {
		if d.MessageId == "copied-1" {
			t.Fatalf("the copied delivery came back")
		}
	}
	a = newAcker(ch)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	for _, d := range ds {
		d.Acknowledger = a
	}
	// A copied delivery last in the run: the multiple ack names the one before.
	if err := a.Ack(ds[0].DeliveryTag, false); err != nil {
		t.Fatal(err)
	}
	if err := ackAlone(&ds[2]); err != nil {
		t.Fatal(err)
	}
	if err := a.Ack(ds[1].DeliveryTag, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		t.Fatalf("the broker closed the channel: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	_ = ch.Close()
	if n := readyMessages(t, queue); n != 0 {
		t.Errorf("%d messages back in the queue after every delivery was settled, want 0", n)
	}
}
