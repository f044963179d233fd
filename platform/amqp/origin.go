package amqp

import amqp091 "github.com/rabbitmq/amqp091-go"

// Headers a consumer's copy of a delivery carries (retry copies, dead-letter
// copies, dead letters sent back): where the original delivery entered the
// broker, as the consumer read it on receipt (docs/architecture.md, rule 8).
const (
	HeaderOriginExchange = "x-origin-exchange"
	HeaderOriginUserID   = "x-origin-user-id"
)

// CopiesExchange names the direct exchange through which the service that
// consumes queue sends its own copies of its deliveries: "<queue>.copies",
// bound to queue, its dead-letter queue and its retry queues, each with its own
// name as the routing key, and the dead-letter exchange of the retry queues.
// Only that service's broker user may write to it (deploy/rabbitmq), so a
// message that arrives through it is a copy the service made itself.
func CopiesExchange(queue string) string { return queue + ".copies" }

// Origin is where a delivery entered the broker: the exchange it was published
// to and its user_id property, which RabbitMQ checks against the publishing
// connection's user ("" when the publisher set none).
type Origin struct {
	Exchange string
	UserID   string
}

// OriginOf returns the origin of a delivery consumed from queue (or from its
// dead-letter queue) that arrived through exchange with userID and headers: for
// a copy the consuming service made, which arrives through
// CopiesExchange(queue), the origin its headers carry (HeaderOriginExchange,
// HeaderOriginUserID); for any other delivery, exchange and userID themselves,
// whatever its headers say.
func OriginOf(queue, exchange, userID string, headers amqp091.Table) Origin {
	if exchange != CopiesExchange(queue) {
		return Origin{Exchange: exchange, UserID: userID}
	}
	ex, _ := headers[HeaderOriginExchange].(string)
	user, _ := headers[HeaderOriginUserID].(string)
	return Origin{Exchange: ex, UserID: user}
}

// Stamp writes o into h, the headers of a copy sent through CopiesExchange.
func (o Origin) Stamp(h amqp091.Table) {
	h[HeaderOriginExchange] = o.Exchange
	h[HeaderOriginUserID] = o.UserID
}
