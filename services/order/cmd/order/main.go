// Command order is the order service: it serves the orders over HTTP, moves placed
// orders on stock's answers from order.events, and publishes its events through its
// outbox.
//
//	order serve                            HTTP API on HTTP_ADDR (default :8081) and the consumer of order.events
//	order relay                            publish the outbox to RabbitMQ (metrics on HTTP_ADDR, default :8084)
//	order migrate                          create the database if missing and apply the embedded migrations
//	order purge-inbox --older-than 720h    delete the answers' processed_event keys older than the horizon
//	order dlq list|show|replay|drop|undrop
//	                                       read, replay, drop or undrop dead letters
//	order purge-outbox --older-than 168h   delete outbox rows published, and Idempotency-Keys used, longer ago than the horizon
//	order replay-outbox --since T --until T [--event-name N] [--dry-run] [--force]
//	                                       put the published events of a period back in line for the relay
//
// `order help` lists the commands, `order help <command>` a command's flags and the
// environment variables it reads with their defaults (config.go); run.go mounts
// the commands.
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
