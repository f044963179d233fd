package inbox

import (
	"fmt"
	"slices"
	"strings"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
)

// Publishers says who may publish the events a consumer accepts
// (docs/architecture.md, rule 8): every event enters the broker through
// Exchange, published by the broker user Users names for the event's producer
// in the registry (contracts.ProducerOf). RabbitMQ checks the user_id property
// against the publishing connection's user, so a user_id names who really
// published. A nil Users accepts any user, still through Exchange only: the
// local quick start, where every process connects as guest.
type Publishers struct {
	// Exchange is the one exchange events may enter through (contracts.Exchange).
	Exchange string
	// Users maps a producer's name to its relay's broker user, e.g.
	// {"order": "order-relay", "stock": "stock-relay"} (RELAY_USERS).
	Users map[string]string
}

// Check returns nil when an event named eventName that entered the broker at
// o may be applied, else an error naming what does not match: the exchange, an
// event no producer of the registry publishes, a producer Users does not name,
// or the user.
func (p Publishers) Check(eventName string, o amqp.Origin) error {
	if o.Exchange != p.Exchange {
		return fmt.Errorf("unauthenticated: published to exchange %q, not %s", o.Exchange, p.Exchange)
	}
	if p.Users == nil {
		return nil
	}
	prod, ok := contracts.ProducerOf(eventName)
	if !ok {
		return fmt.Errorf("unauthenticated: no producer publishes %s", eventName)
	}
	want, ok := p.Users[prod.Name]
	if !ok {
		return fmt.Errorf("unauthenticated: no broker user is named for producer %s (RELAY_USERS)", prod.Name)
	}
	if o.UserID != want {
		return fmt.Errorf("unauthenticated: %s published with user_id %q, not %q, the relay user of %s", eventName, o.UserID, want, prod.Name)
	}
	return nil
}

// Vouched returns the origin Check accepts for an event named eventName: Exchange
// and the relay user Users names for its producer ("" when Users names none, which
// Check then does not ask for). `dlq replay --force` sends a message with it.
func (p Publishers) Vouched(eventName string) amqp.Origin {
	o := amqp.Origin{Exchange: p.Exchange}
	if prod, ok := contracts.ProducerOf(eventName); ok {
		o.UserID = p.Users[prod.Name]
	}
	return o
}

// ParseRelayUsers parses RELAY_USERS, "producer=user,..." such as
// "order=order-relay,stock=stock-relay": every producer a name of the registry
// (contracts.Producers), each named once, every user non-empty. An empty raw
// is nil (any user).
func ParseRelayUsers(raw string) (map[string]string, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var producers []string
	for _, p := range contracts.Producers() {
		producers = append(producers, p.Name)
	}
	users := map[string]string{}
	for _, pair := range strings.Split(raw, ",") {
		prod, user, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || prod == "" || user == "" {
			return nil, fmt.Errorf("%q is not producer=user", pair)
		}
		if !slices.Contains(producers, prod) {
			return nil, fmt.Errorf("%q is no producer of the registry (%s)", prod, strings.Join(producers, ", "))
		}
		if _, dup := users[prod]; dup {
			return nil, fmt.Errorf("producer %s is named twice", prod)
		}
		users[prod] = user
	}
	return users, nil
}

// WithPublishers makes HandleDelivery dead-letter at once, before any database
// write, a delivery p.Check refuses, counted in inbox_failures_total with reason
// "unauthenticated" (docs/architecture.md, rule 8). Without it every origin is
// accepted.
func WithPublishers(p Publishers) Option {
	return func(i *Inbox) { i.publishers = &p }
}
