// Command shipping is the shipping service: it keeps a versioned copy of each
// order's status and the order's shipment from the order events on
// shipping.events, and serves both over HTTP.
//
//	shipping serve                           HTTP (HTTP_ADDR) and the event consumer
//	shipping migrate                         create the database if missing and apply migrations
//	shipping purge-inbox --older-than 720h   delete processed_event keys older than the horizon
//	shipping dlq list|show|replay|drop|undrop
//	                                         read, replay, drop or undrop dead letters
//
// `shipping help` lists the commands, `shipping help <command>` a command's flags and
// the environment variables it reads with their defaults (config.go); run.go holds
// each command's life cycle.
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
