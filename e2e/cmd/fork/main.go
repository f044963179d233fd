// Command fork copies this repository into a new folder under a new module path
// and project name, as a template for a system of one's own (docs/fork.md).
// `make fork MODULE=github.com/acme/orders [NAME=acme] [DIR=../acme] [WITHOUT=mysqlinbox,...]`
// runs it.
//
// It copies the tracked files only (`git ls-files`, as they are in the working
// tree; no history), rewrites the module path in every go.mod (through
// golang.org/x/mod/modfile), Go import, ldflags, JSON Schema $id, problem type
// and document, and the project name wherever it is a word of its own (the
// image, the compose project, the demo vhost, the Kubernetes namespace and
// labels, the dashboard, the alert groups, prose), in file names too. It prints
// every file it changed with its counts, and what it left alone on purpose: the
// domain's database, event, queue and exchange names, which a fork keeps or
// renames with its domain. It never writes to the source repository. Flags:
//
//	-module PATH  the fork's module path prefix, e.g. github.com/acme/orders (required)
//	-name NAME    the fork's project name: a lowercase letter, then lowercase letters
//	              and digits, 40 at most, that the code does not use already
//	              (default: the module path's last element)
//	-dir DIR      the new folder; must not exist or be empty (default ../NAME)
//	-from DIR     the repository to copy (default .)
//	-without LIST options to leave out, comma-separated folder names of integrations/
//	              (docs/adr/0011), e.g. mysqlinbox,watermillinbox
//
// The exit code is 2 for a bad flag or argument, 1 for any other failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fork", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mod := fs.String("module", "", "the fork's module path prefix, e.g. github.com/acme/orders")
	name := fs.String("name", "", "the fork's project name (default: the module path's last element)")
	dir := fs.String("dir", "", "the new folder (default ../NAME)")
	from := fs.String("from", ".", "the repository to copy")
	without := fs.String("without", "", "comma-separated options (folders of integrations/) to leave out")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fork: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *name == "" {
		*name = path.Base(*mod)
	}
	if *dir == "" {
		*dir = filepath.Join("..", *name)
	}
	start := time.Now()
	o := Options{Source: *from, Dir: *dir, Module: *mod, Name: *name}
	if *without != "" {
		o.Without = strings.Split(*without, ",")
	}
	rep, err := Fork(o)
	if err != nil {
		fmt.Fprintf(stderr, "fork: %v\n", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	rep.Print(stdout)
	fmt.Fprintf(stdout, "done in %s. Next: cd %s && git init && git add -A && git commit -m %q\n",
		time.Since(start).Round(time.Millisecond), *dir, "Fork of "+rep.OldModule)
	return 0
}

// usageError is a refusal caused by the flags: a bad module path or name, or a
// folder that is not empty.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// joinLimit joins at most n items and says how many more there are.
func joinLimit(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}
