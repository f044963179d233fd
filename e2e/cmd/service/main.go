// Command service adds a service to the repository by the recipe of
// docs/architecture.md ("Add a fourth service"), so that the recipe holds by
// construction. `make service NAME=billing [KIND=consumer|both]` runs it.
//
// It writes services/NAME from the templates beside this file (a binary that
// mounts platform/consumerapp, an inbox handler for every event of its registry
// entry recording each one in received_event, a read API, migrations and tests),
// adds it to go.work, adds its registry entry and broker names to contracts and
// its channels to contracts/asyncapi.yaml, and gives it every deploy entry that
// e2e/registry_test.go asks of a consumer (docker-compose.yml, Prometheus,
// deploy/k8s, deploy/postgres/roles.sql, deploy/rabbitmq/definitions.json), each
// made like the entry of the service -like (shipping by default). KIND=both adds
// the producer half too (step 8 of the recipe): the binary also mounts
// platform/producerapp, its schema the outbox, and each handler of another
// producer's event writes NAME.NAME.recorded.v1 to the outbox in the inbox's
// transaction; the event gets its constant, payload type and JSON Schema in
// contracts, a Producer entry, and NAME as its consumer (the registry wants one
// for every event; NAME only records its own event), and the relay its deploy
// entries, made like those of -like-producer's relay (stock's by default). It
// prints every file it wrote or changed. Flags:
//
//	-name NAME           the new service: a lowercase letter, then lowercase letters and digits
//	-kind KIND           consumer (the default) or both; producer is refused: add it
//	                     with both, then drop its consumer half
//	-like NAME           the consumer whose deploy entries the new ones copy (default shipping)
//	-like-producer NAME  KIND=both: the producer whose relay's entries the new ones copy (default stock)
//	-root DIR            the repository (default .)
//
// The exit code is 2 for a bad flag or argument, 1 for any other failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	fs.StringVar(&o.Name, "name", "", "the new service's name, e.g. billing")
	fs.StringVar(&o.Kind, "kind", "consumer", "consumer or both (a consumer that also publishes an event of its own)")
	fs.StringVar(&o.Like, "like", "shipping", "the consumer whose deploy entries the new ones copy")
	fs.StringVar(&o.LikeProducer, "like-producer", "stock", "KIND=both: the producer whose relay's deploy entries the new ones copy")
	fs.StringVar(&o.Root, "root", ".", "the repository")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "service: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	start := time.Now()
	files, err := Add(o)
	if err != nil {
		fmt.Fprintf(stderr, "service: %v\n", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, "  "+f)
	}
	fmt.Fprintf(stdout, "added %s (%s) in %s: %d files written or changed.\n", o.Name, o.Kind, time.Since(start).Round(time.Millisecond), len(files))
	fmt.Fprintf(stdout, "Next: go test -run FollowsTheRegistry ./e2e/ and (cd services/%s && go test ./...); then its domain.\n", o.Name)
	return 0
}

// usageError is a refusal caused by the flags.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}
