// Command auditor is the delivery auditor: it reads, never writes, the database of every
// service in the registry (contracts.Services: order, stock, shipping), checks that every published event reached every consumer that
// should receive it, and shows each order's journey on a live page.
//
//	auditor serve      HTTP on HTTP_ADDR (default :8085): the live page at /, the journey
//	                   API, /audit, /healthz, /readyz and /metrics; the continuous audit
//	auditor --version  print the version
//
// `auditor help serve` lists the environment variables it reads with their defaults
// (config.go); run.go holds its life cycle.
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
