package system

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/amqp"
)

// Dial connects to amqpURL, one node or a comma-separated list of a cluster's
// nodes (the first that accepts), each dial bounded by 5 s.
func Dial(amqpURL string) (*amqp091.Connection, error) {
	nodes, err := amqp.ParseNodes(amqpURL)
	if err != nil {
		return nil, err
	}
	conn, _, err := nodes.Dial(context.Background(), 5*time.Second, amqp091.Config{})
	return conn, err
}

// Publish sends one message to exchange with routing key key the way the
// relay does (persistent, mandatory, content type application/json,
// message_id and type set, user_id the user of amqpURL), waits for the
// broker's confirm (up to 10 s) and returns an error when it is nacked,
// returned as unroutable, or not confirmed. It opens and closes its own
// connection to amqpURL. A consumer given RELAY_USERS accepts the message only
// when amqpURL is the URL of the relay user of the event's producer.
func Publish(ctx context.Context, amqpURL, exchange, key, messageID string, body []byte) error {
	uri, err := amqp091.ParseURI(amqpURL)
	if err != nil {
		return fmt.Errorf("publish %s: %w", messageID, err)
	}
	conn, err := Dial(amqpURL)
	if err != nil {
		return fmt.Errorf("publish %s: dial: %w", messageID, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("publish %s: channel: %w", messageID, err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("publish %s: confirm mode: %w", messageID, err)
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, amqp091.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp091.Persistent,
		MessageId:    messageID,
		Type:         key,
		Timestamp:    time.Now().UTC(),
		UserId:       uri.Username,
		Body:         body,
	})
	if err != nil {
		return fmt.Errorf("publish %s: %w", messageID, err)
	}
	acked, err := conf.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("publish %s: wait for confirm: %w", messageID, err)
	}
	if !acked {
		return fmt.Errorf("publish %s: nacked by the broker", messageID)
	}
	select {
	case r := <-returns:
		return fmt.Errorf("publish %s: returned: %d %s", messageID, r.ReplyCode, r.ReplyText)
	default:
		return nil
	}
}

// QueueDepths returns the number of ready messages in each named queue, read
// with a passive queue declare (which creates nothing). A queue that does not
// exist is reported as an error naming it; the other queues are still read.
func QueueDepths(ctx context.Context, amqpURL string, queues ...string) (map[string]int, error) {
	conn, err := Dial(amqpURL)
	if err != nil {
		return nil, fmt.Errorf("queue depths: dial: %w", err)
	}
	defer conn.Close()
	depths := make(map[string]int, len(queues))
	var errs []error
	for _, q := range queues {
		if err := ctx.Err(); err != nil {
			return depths, err
		}
		// A failed passive declare closes the channel, so each queue gets its own.
		ch, err := conn.Channel()
		if err != nil {
			return depths, fmt.Errorf("queue depths: channel: %w", err)
		}
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", q, err))
			continue
		}
		depths[q] = info.Messages
		_ = ch.Close()
	}
	return depths, errors.Join(errs...)
}
