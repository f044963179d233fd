// Command stock is the stock service: it reserves stock for placed orders from the
// order events on stock.events, serves the inventory and the reservations over HTTP,
// and publishes its answers (stock.reservation.confirmed.v1, rejected.v1) through
// its outbox.
//
//	stock serve                           HTTP (HTTP_ADDR) and the event consumer
//	stock relay                           publish the outbox to RabbitMQ (metrics on HTTP_ADDR, default :8087)
//	stock migrate                         create the database if missing and apply migrations
//	stock purge-inbox --older-than 720h   delete processed_event keys older than the horizon
//	stock dlq list|show|replay|drop|undrop
//	                                      read, replay, drop or undrop dead letters
//	stock purge-outbox --older-than 168h  delete outbox rows published longer ago than the horizon
//	stock replay-outbox --since T --until T [--event-name N] [--dry-run] [--force]
//	                                      put the published events of a period back in line for the relay
//
// `stock help` lists the commands, `stock help <command>` a command's flags and the
// environment variables it reads with their defaults (config.go); run.go holds each
// command's life cycle.
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
	os.Exit(cli.Exit(os.Stderr, name, err))
}
