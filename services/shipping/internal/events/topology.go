package events

import (
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
)

// Topology returns the broker entities the shipping service declares: the
// shared exchanges of amqp.DefaultTopology and only its own queue,
// shipping.events, bound to the placed and cancelled events, with its
// dead-letter queue and one retry queue per delay in retryDelays (whole
// milliseconds). The delays must be those given to the consumer
// (amqp.ConsumerConfig.RetryDelays); declaring other delays on a broker that
// already holds the retry queues fails with PRECONDITION_FAILED.
func Topology(retryDelays []time.Duration) amqp.Topology {
	t := amqp.DefaultTopology()
	t.Queues = []amqp.QueueSpec{{
		Name:            contracts.QueueShipping,
		DeadLetterQueue: contracts.QueueShippingDLQ,
		RoutingKeys:     []string{contracts.EventOrderPlaced, contracts.EventOrderCancelled},
		RetryDelays:     retryDelays,
	}}
	return t
}
