// Command auditor is the delivery auditor: it reads, never writes, the order, stock and
// shipping databases, checks that every published event reached every consumer that
// should receive it, and shows each order's journey on a live page.
//
//	auditor serve      HTTP on HTTP_ADDR (default :8085): the live page at /, the journey
//	                   API, /audit, /healthz, /readyz and /metrics; the continuous audit
//	auditor --version  print the version
//
// Configuration is read from the environment; see config.go.
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
		fmt.Fprintln(os.Stderr, "auditor:", err)
		os.Exit(1)
	}
}
