package consumerapp

import (
	"slices"
	"time"

	"example.com/shop/platform/amqp"
)

// Topology returns the broker entities one consuming service declares: the shared
// exchanges of amqp.DefaultTopology (app.events with its alternate exchange and
// unroutable queue, the dead-letter exchange) and only queue, with its dead-letter
// queue and one retry queue per delay in retryDelays (whole milliseconds, >= 1 ms;
// nil declares none). The delays must be those given to the consumer
// (amqp.ConsumerConfig.RetryDelays), as serve does.
func Topology(queue amqp.QueueSpec, retryDelays []time.Duration) amqp.Topology {
	t := amqp.DefaultTopology()
	queue.RoutingKeys = slices.Clone(queue.RoutingKeys)
	queue.RetryDelays = slices.Clone(retryDelays)
	t.Queues = []amqp.QueueSpec{queue}
	return t
}
