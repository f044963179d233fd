// Command service adds a service to the repository by the recipe of docs/architecture.md
// ("Add a service"). `make service NAME=billing [KIND=consumer|producer|both]` runs it.
//
// It writes services/NAME from the templates beside this file. A consumer: a binary that
// mounts platform/consumerapp, a typed inbox handler (inbox.On) for every event it receives
// that records the event in received_event, a domain package, its store, a read API with its
// OpenAPI document, migrations and tests. A producer only: a binary that mounts
// platform/producerapp, and the same parts around its records. It adds one entry to the registry
// (contracts/registry.go: Services) and the module to go.work, then runs `make generate`,
// which brings every deploy file, the AsyncAPI document and the event names in line with
// the registry. It edits no other file.
//
// A consumer receives every event of the registry's first producer (order's, here). A producer
// publishes one event of its own, NAME.NAME.recorded.v1: its JSON Schema in contracts/schemas,
// its payload type in the service's domain package, an outbox in its schema and `NAME relay`.
// KIND=producer takes records over HTTP (POST /records) and writes the event for each; until a
// service receives it, its copies wait in app.events.unroutable. KIND=both is a consumer whose
// handlers write the event for each event of another producer they record; it receives its
// own event too.
//
// It prints every file it wrote and every file `make generate` wrote. Flags:
//
//	-name NAME  the new service: a lowercase letter, then lowercase letters and digits
//	-kind KIND  consumer (the default), producer or both
//	-root DIR   the repository (default .)
//
// The exit code is 2 for a bad flag or argument, 1 for any other failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
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
	fs.StringVar(&o.Kind, "kind", "consumer", "consumer, producer (takes records over HTTP, publishes an event for each) or both (a consumer that also publishes an event of its own)")
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
	r, err := Add(o)
	if err != nil {
		fmt.Fprintf(stderr, "service: %v\n", err)
		if len(r.Wrote) > 0 {
			fmt.Fprintf(stderr, "service: it had written, and left as they are: %s\n", strings.Join(r.Wrote, " "))
		}
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	fmt.Fprintln(stdout, "wrote:")
	for _, f := range r.Wrote {
		fmt.Fprintln(stdout, "  "+f)
	}
	fmt.Fprintln(stdout, "make generate wrote:")
	for _, f := range r.Generated {
		fmt.Fprintln(stdout, "  "+f)
	}
	fmt.Fprintf(stdout, "added %s (%s, HTTP %s) in %s: %d files written, %d generated.\n",
		o.Name, o.Kind, r.HTTPAddr, time.Since(start).Round(time.Millisecond), len(r.Wrote), len(r.Generated))
	fmt.Fprintf(stdout, "Next: (cd services/%s && go test ./...); then its own tables and handlers (docs/architecture.md, \"Add a service\").\n", o.Name)
	if o.Kind == "producer" {
		fmt.Fprintf(stdout, "No service receives %s.%s.recorded.v1 yet: until one lists it in Receives, the relay's copies go to app.events.unroutable "+
			"(the UnroutableEvents alert); give a consumer added later the earlier ones with `%s replay-outbox` (docs/fork.md).\n", o.Name, o.Name, o.Name)
	}
	return 0
}

// usageError is a refusal caused by the flags.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}
