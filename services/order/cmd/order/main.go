// Command order is the order service.
//
//	order serve                            HTTP API on HTTP_ADDR (default :8081) with /healthz, /readyz, /metrics
//	order relay                            publish the outbox to RabbitMQ (metrics on HTTP_ADDR, default :8084)
//	order migrate                          create the database if missing and apply the embedded migrations
//	order purge-outbox --older-than 168h   delete outbox rows published, and Idempotency-Keys used, longer ago than the horizon
//	order replay-outbox --since T --until T [--event-name N] [--dry-run] [--force]
//	                                       put the published events of a period back in line for the relay
//
// `order help` lists the commands, `order help <command>` a command's flags and the
// environment variables it reads with their defaults. run.go holds serve's and
// migrate's life cycle (config.go their variables); relay, purge-outbox and
// replay-outbox are the producer commands of package producerapp, mounted in run.go.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"example.com/shop/platform/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stderr, service, err))
}
