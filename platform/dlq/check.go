package dlq

import (
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/platform/inbox"
)

// Check reports why the service's consumer would dead-letter a message again at
// once, before any database write, or nil when it would handle it. replay runs it
// on every message it moves, --dry-run included (Config.Check).
type Check func(d amqp091.Delivery) error

// ContractCheck is the Check of consumer c of the contract, the one its inbox runs
// on a delivery before any database write (inbox.CheckDelivery: content_type,
// the envelope's schema, message_id and type against the envelope; p.Check: the
// message's origin, amqp.OriginOf), and an event that c does not receive. Its
// error names the first of these.
func ContractCheck(v *contracts.Validator, c contracts.Consumer, p inbox.Publishers) Check {
	return func(d amqp091.Delivery) error {
		env, err := inbox.CheckDelivery(v, d.ContentType, d.MessageId, d.Type, d.Body)
		if err != nil {
			return err
		}
		if err := p.Check(env.EventName, amqp.OriginOf(c.Queue, d.Exchange, d.UserId, d.Headers)); err != nil {
			return err
		}
		if !c.Receives(env.EventName) {
			return fmt.Errorf("%s receives no %s events", c.Name, env.EventName)
		}
		return nil
	}
}
