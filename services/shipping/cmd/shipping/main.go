// Command shipping is the shipping service: it keeps a versioned copy of each
// order's status and the order's shipment from the order events on
// shipping.events, and serves both over HTTP.
//
//	shipping serve                           HTTP (HTTP_ADDR) and the event consumer
//	shipping migrate                         create the database if missing and apply migrations
//	shipping purge-inbox --older-than 720h   delete processed_event keys older than the horizon
//
// The commands and settings are those of consumerapp.Run (SHIPPING_* variables, see
// consumerapp.Settings); spec.go holds what is the shipping service's own.
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
		fmt.Fprintln(os.Stderr, "shipping:", err)
		os.Exit(1)
	}
}
