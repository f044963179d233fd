// Command generate renders every file derived from the registry (contracts/registry.go)
// and the schemas (contracts/schemas): the compose files, the Kubernetes manifests, the
// database roles, the broker definitions, Prometheus' targets, alerts and dashboard, and
// the AsyncAPI document (docs/architecture.md, "One declaration"). `make generate` runs it
// after `go generate ./contracts`, which derives the event names from the schemas.
//
// Each file of templates/ is a text/template rendered to the same path under the
// repository, without its .tmpl suffix; a path holding [service], [producer] or
// [consumer] is rendered once for each such service of the registry, with its name in
// place. Every rendered file says in its first line that it is generated.
//
// Usage:
//
//	generate [-root DIR] [-check]
//
// -check writes nothing and exits 1 naming each file that is not what the registry makes,
// and each generated file the registry no longer makes; without it, generate writes the
// first and removes the second. It exits 2 on a template error, and before rendering
// anything when Validate refuses the registry (two services deriving one broker user,
// PostgreSQL role, database or port).
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	root := flag.String("root", ".", "the repository's root folder")
	check := flag.Bool("check", false, "write nothing; exit 1 naming each file that is not current")
	flag.Parse()
	m, err := NewModel(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(2)
	}
	files, err := Render(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(2)
	}
	stale, err := Sync(*root, files, *check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(2)
	}
	for _, s := range stale {
		if *check {
			fmt.Fprintf(os.Stderr, "%s: run make generate\n", s)
		} else {
			fmt.Println("generate:", s)
		}
	}
	if *check && len(stale) > 0 {
		os.Exit(1)
	}
}
