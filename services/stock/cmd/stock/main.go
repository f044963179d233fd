// Command stock is the stock service: it reserves stock for placed orders from the
// order events on stock.events and serves the reservations over HTTP.
//
//	stock serve                           HTTP (HTTP_ADDR) and the event consumer
//	stock migrate                         create the database if missing and apply migrations
//	stock purge-inbox --older-than 720h   delete processed_event keys older than the horizon
//
// The commands and settings are those of consumerapp.Run (STOCK_* variables, see
// consumerapp.Settings); spec.go holds what is the stock service's own.
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
		fmt.Fprintln(os.Stderr, "stock:", err)
		os.Exit(1)
	}
}
