package dlq

import (
	"fmt"
	"mime"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
)

// Check reports why the service's consumer would dead-letter a message again at
// once, before any database write, or nil when it would handle it. replay runs it
// on every message it moves, --dry-run included (Config.Check).
type Check func(d amqp091.Delivery) error

// ContractCheck is the Check of consumer c of the contract, the one its inbox runs
// on a delivery (inbox.HandleDelivery) before any database write: a content_type
// that is set and is not application/json, a body that does not decode or fails
// its schema (v.Decode, the strict decoder: a member given twice counts with its
// last value), a message_id that is set and differs from the envelope's event_id,
// or an event that c does not receive. Its error names the first of these.
func ContractCheck(v *contracts.Validator, c contracts.Consumer) Check {
	return func(d amqp091.Delivery) error {
		if d.ContentType != "" {
			if media, _, err := mime.ParseMediaType(d.ContentType); err != nil || media != "application/json" {
				return fmt.Errorf("content_type %q is not application/json", d.ContentType)
			}
		}
		env, err := v.Decode(d.Body)
		if err != nil {
			return err
		}
		if id, err := uuid.Parse(d.MessageId); d.MessageId != "" && (err != nil || id != env.EventID) {
			return fmt.Errorf("message_id %q differs from the envelope's event_id %s", d.MessageId, env.EventID)
		}
		if !c.Receives(env.EventName) {
			return fmt.Errorf("%s receives no %s events", c.Name, env.EventName)
		}
		return nil
	}
}
