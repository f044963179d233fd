// Command order is the order service.
//
//	order serve                            HTTP API on HTTP_ADDR (default :8081) with /healthz, /readyz, /metrics
//	order relay                            publish the outbox to RabbitMQ (metrics on HTTP_ADDR, default :8084)
//	order migrate                          create the database if missing and apply the embedded migrations
//	order purge-outbox --older-than 168h   delete outbox rows published, and Idempotency-Keys used, longer ago than the horizon
//	order replay-outbox --since T --until T [--event-name N] [--dry-run] [--force]
//	                                       put the published events of a period back in line for the relay
//
// Configuration is read from the environment; see config.go and relay.go.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "order:", err)
		os.Exit(1)
	}
}
