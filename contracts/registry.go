package contracts

import (
	"slices"
	"strings"
)

// The registry: every service that publishes ([Producers]) or consumes ([Consumers]) events,
// and where each one runs by default ([Services]). It is the one list the rest of the
// repository follows: the auditor reads one database per service and audits every consumer;
// the AsyncAPI document, the end-to-end system, the build and the deploy files are checked
// against it by tests, and `make generate` derives every deploy file from it
// (docs/architecture.md, "Add a service"). Adding a service is one entry in [Services].

// Consumer names, the `consumer` column of each consuming service's processed_event and
// dead_letter tables.
const (
	// ConsumerStock is the stock service's consumer: it reserves stock for placed orders.
	ConsumerStock = "stock"
	// ConsumerShipping is the shipping service's consumer: it keeps order_status and shipments.
	ConsumerShipping = "shipping"
	// ConsumerOrder is the order service's consumer: it moves placed orders on stock's answers.
	// The order API keeps its Idempotency-Keys under a consumer of its own, "order-api".
	ConsumerOrder = "order"
)

// Producer describes one service that publishes events through its own outbox and relay.
type Producer struct {
	// Name is the producer name, e.g. [ProducerOrder]: the envelope's `producer`, the
	// CloudEvents source "/<Name>" and the service (binary) that runs `<Name> relay`.
	Name string
	// Events are the event names it writes to its outbox and publishes.
	Events []string
	// RelayUser is the broker user its relay connects as in deploy/rabbitmq/definitions.json:
	// the user_id its events carry, the only one consumers accept for them when
	// RELAY_USERS names it (docs/architecture.md, rule 8).
	RelayUser string
}

// Publishes reports whether the producer publishes eventName.
func (p Producer) Publishes(eventName string) bool {
	return slices.Contains(p.Events, eventName)
}

// Producers returns every producer of the registry, the [Services] that publish, in their
// order, in a fresh slice the caller may modify. A producer's relay user is "<name>-relay".
func Producers() []Producer {
	var out []Producer
	for _, s := range Services() {
		if len(s.Publishes) > 0 {
			out = append(out, Producer{Name: s.Name, Events: s.Publishes, RelayUser: s.Name + "-relay"})
		}
	}
	return out
}

// ProducerOf returns the producer that publishes eventName, and false for an event no
// producer publishes.
func ProducerOf(eventName string) (Producer, bool) {
	for _, p := range Producers() {
		if p.Publishes(eventName) {
			return p, true
		}
	}
	return Producer{}, false
}

// RelayUsers returns RELAY_USERS as the registry names them, "producer=user,..." in
// the order of Producers, e.g. "order=order-relay,stock=stock-relay": what a deployment
// under the users of deploy/rabbitmq/definitions.json gives its consumers.
func RelayUsers() string {
	pairs := make([]string, 0, len(Producers()))
	for _, p := range Producers() {
		pairs = append(pairs, p.Name+"="+p.RelayUser)
	}
	return strings.Join(pairs, ",")
}

// Consumer describes one consuming service on the broker: the queue it reads, its dead-letter
// queue and the events (routing keys) bound to its queue. It is the topology every consumer
// declares and the auditor checks against: an event published to [Exchange] must reach every
// consumer whose Events holds its name.
type Consumer struct {
	// Name is the consumer name, e.g. [ConsumerStock]: also the service (binary) whose
	// `serve` consumes.
	Name string
	// Queue is its durable quorum queue, e.g. [QueueStock].
	Queue string
	// DeadLetterQueue is the dead-letter queue of Queue, e.g. [QueueStockDLQ].
	DeadLetterQueue string
	// Events are the event names bound to Queue as routing keys.
	Events []string
}

// Receives reports whether the consumer's queue is bound to eventName.
func (c Consumer) Receives(eventName string) bool {
	return slices.Contains(c.Events, eventName)
}

// Consumers returns every consumer of the registry, the [Services] that receive, in their
// order, in a fresh slice the caller may modify. A consumer's queue is "<name>.events" and
// its dead-letter queue "<name>.events.dlq".
func Consumers() []Consumer {
	var out []Consumer
	for _, s := range Services() {
		if len(s.Receives) > 0 {
			out = append(out, Consumer{Name: s.Name, Queue: s.Name + ".events", DeadLetterQueue: s.Name + ".events.dlq", Events: s.Receives})
		}
	}
	return out
}

// ConsumersOf returns the consumers that receive eventName, in the order of [Consumers]; none
// for an unknown event.
func ConsumersOf(eventName string) []Consumer {
	var out []Consumer
	for _, c := range Consumers() {
		if c.Receives(eventName) {
			out = append(out, c)
		}
	}
	return out
}

// ConsumerNamed returns the consumer of [Consumers] called name, and false when the
// contract has none.
func ConsumerNamed(name string) (Consumer, bool) {
	for _, c := range Consumers() {
		if c.Name == name {
			return c, true
		}
	}
	return Consumer{}, false
}

// Service is one service of the registry, a producer, a consumer or both, with the local
// defaults its binary uses when its variables are unset. It is the one declaration of the
// service: its producer and consumer entries, its queues, users and roles, and every deploy
// file that lists services are derived from it (`make generate`, docs/architecture.md).
type Service struct {
	// Name is the service's name: its folder services/<Name>, its binary bin/<Name>, the
	// prefix of its variables (<NAME>_DATABASE_URL), its consumer and producer names.
	Name string
	// Database is the name of its PostgreSQL database by default, e.g. "orders".
	Database string
	// HTTPAddr is the default listen address of its `serve` (HTTP_ADDR), e.g. ":8081"; its
	// /metrics is there too.
	HTTPAddr string
	// AppRole is the PostgreSQL role of its serve when it is not "<name>_app"
	// (order's is "order_api"); see [Service.Role].
	AppRole string
	// RelayAddr is the default listen address of its `relay` (HTTP_ADDR of the relay, its
	// health and /metrics), e.g. ":8084"; empty for a service that publishes nothing.
	RelayAddr string
	// Publishes are the events it writes to its outbox and its relay publishes: it is a
	// [Producer] when there is one.
	Publishes []string
	// Receives are the events bound to its queue: it is a [Consumer] when there is one.
	Receives []string
}

// Services returns every service of the registry, in a fresh slice the caller may modify;
// the comment of each entry says what the service does.
func Services() []Service {
	return []Service{
		// order takes orders over HTTP, publishes their changes and moves placed orders on
		// stock's answers.
		{Name: "order", Database: "orders", HTTPAddr: ":8081", AppRole: "order_api", RelayAddr: ":8084",
			Publishes: []string{EventOrderPlaced, EventOrderCancelled, EventOrderConfirmed, EventOrderRejected},
			Receives:  []string{EventStockReservationConfirmed, EventStockReservationRejected}},
		// stock reserves for placed orders, releases for cancelled ones and answers placed
		// orders.
		{Name: "stock", Database: "stock", HTTPAddr: ":8082", RelayAddr: ":8087",
			Publishes: []string{EventStockReservationConfirmed, EventStockReservationRejected},
			Receives:  []string{EventOrderPlaced, EventOrderCancelled}},
		// shipping follows every status of an order and keeps the order's shipment.
		{Name: "shipping", Database: "shipping", HTTPAddr: ":8083",
			Receives: []string{EventOrderPlaced, EventOrderCancelled, EventOrderConfirmed, EventOrderRejected}},
	}
}

// Role returns the PostgreSQL role of one kind of its processes: "app" (its serve),
// "relay" or "maintenance" (its other commands), as deploy/postgres/roles.sql creates
// them: "<name>_<kind>" with the name's "-" as "_", or AppRole for "app" when set.
func (s Service) Role(kind string) string {
	if kind == "app" && s.AppRole != "" {
		return s.AppRole
	}
	return strings.ReplaceAll(s.Name, "-", "_") + "_" + kind
}

// EnvPrefix is the prefix of its own variables, underscore included: its name in upper
// case with "-" as "_", then "_" ("STOCK_": STOCK_DATABASE_URL, STOCK_WORKERS).
func (s Service) EnvPrefix() string {
	return strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_")) + "_"
}

// LocalDatabaseURL is the default of its <EnvPrefix>DATABASE_URL: its Database on the
// local PostgreSQL as postgres, "postgres://postgres@localhost:5432/<Database>?sslmode=disable".
func (s Service) LocalDatabaseURL() string {
	return "postgres://postgres@localhost:5432/" + s.Database + "?sslmode=disable"
}

// MustService returns the service of [Services] called name, for a service's binary
// reading its own defaults; it panics when the registry has none, a programming error
// that the binary's first run shows.
func MustService(name string) Service {
	s, ok := ServiceNamed(name)
	if !ok {
		panic("contracts: the registry has no service " + name)
	}
	return s
}

// ServiceNamed returns the service of [Services] called name, and false when the registry
// has none.
func ServiceNamed(name string) (Service, bool) {
	for _, s := range Services() {
		if s.Name == name {
			return s, true
		}
	}
	return Service{}, false
}
