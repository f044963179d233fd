package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/project"
	"example.com/shop/testkit"
	"example.com/shop/testkit/rabbitadmin"
)

// allowed are the words containing the old project name that a fork keeps, each
// with its reason. The search fails on every other word that contains it, in any
// case.
var allowed = map[string]string{
	"Shopify":                    "github.com/Shopify/toxiproxy, a third-party module the fault tests use",
	"shopspring":                 "github.com/shopspring/decimal, a third-party module in go.sum",
	"shopt":                      "the bash builtin in deploy/compose-test.sh",
	"newShop":                    "a Go identifier of the end-to-end harness (starts one system); internal to the tests",
	"shopTopology":               "a Go identifier of the bench (the queues it empties); internal to the tests",
	"shopNames":                  "a Go identifier of the boundary test (service names in platform code); internal to the tests",
	"ShopNames":                  "the same boundary test's exported helper",
	"TestShopNamesFindsAService": "the test of that helper",
	"shopWord":                   "a Go identifier of that helper",
	"shopIdent":                  "a Go identifier of that helper",
}

// TestForkThenAddAService is the template's proof, on one fork so that the fork's
// packages compile once: `make fork` into a temporary folder under a new module
// path and name (project.ForkTarget: github.com/zeta/orders and zeta), the search
// for the old module path and name, gofmt; then `make service NAME=billing` (a
// consumer) and `make service NAME=ledger KIND=both` (a consumer that publishes
// its own event) in the fork, each changing no file outside its service but the
// registry, go.work, ledger's schema and generated files, and there `go build` and
// `go vet` of every module of go.work, the boundary test, the tests of contracts
// and of the platform packages that need no server, billing's and ledger's own
// tests, the registry and Kubernetes tests of e2e and the demo's (its databases,
// processes, roles and broker users), and the end-to-end check in which the
// auditor reports every consumer, billing and ledger included, processing every
// event of an order, and counts none of any producer's events, ledger's included,
// unaccounted.
func TestForkThenAddAService(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	oldModule, err := project.Module(root)
	if err != nil {
		t.Fatal(err)
	}
	oldName, err := project.Name(root)
	if err != nil {
		t.Fatal(err)
	}
	module, name, err := project.ForkTarget(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	// The fork leaves every option out (docs/adr/0011): it must build and pass its tests
	// without them. A fork that has left them out already has none.
	mods, err := filepath.Glob(filepath.Join(root, "integrations", "*", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var options []string
	for _, m := range mods {
		options = append(options, filepath.Base(filepath.Dir(m)))
	}
	runIn(t, root, "make", "--no-print-directory", "fork", "MODULE="+module, "NAME="+name, "DIR="+dir,
		"WITHOUT="+strings.Join(options, ","))
	if _, err := os.Stat(filepath.Join(dir, "integrations")); !os.IsNotExist(err) {
		t.Errorf("the fork WITHOUT=%s has integrations/: %v", strings.Join(options, ","), err)
	}

	t.Run("the fork names the old project nowhere", func(t *testing.T) {
		old := regexp.MustCompile(`(?i)[a-z0-9_]*` + regexp.QuoteMeta(oldName) + `[a-z0-9_]*`)
		var leftovers []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte(oldModule)) {
				leftovers = append(leftovers, rel+": the module path "+oldModule)
			}
			for _, w := range slices.Concat(old.FindAllString(rel, -1), old.FindAllString(string(b), -1)) {
				if _, ok := allowed[w]; !ok {
					leftovers = append(leftovers, rel+": "+w)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(leftovers) > 0 {
			t.Errorf("the fork still names the old project:\n%s", strings.Join(leftovers, "\n"))
		}
		// The rewritten imports must still be in gofmt's order (make lint).
		if out, err := exec.Command("gofmt", "-l", dir).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("gofmt -l in the fork: %v\n%s", err, out)
		}
	})

	// make service edits nothing outside its service but the registry, go.work and, for a
	// producer, its event's schema: every other file it changes says in its first line
	// that make generate wrote it.
	before := snapshot(t, dir)
	runIn(t, dir, "make", "--no-print-directory", "service", "NAME=billing")
	after := snapshot(t, dir)
	checkEdits(t, before, after, "services/billing/", "contracts/registry.go", "go.work")
	runIn(t, dir, "make", "--no-print-directory", "service", "NAME=ledger", "KIND=both")
	afterLedger := snapshot(t, dir)
	checkEdits(t, after, afterLedger, "services/ledger/", "contracts/registry.go", "go.work",
		"contracts/schemas/ledger.ledger.recorded.v1.json")
	runIn(t, dir, "make", "--no-print-directory", "service", "NAME=feed", "KIND=producer")
	checkEdits(t, afterLedger, snapshot(t, dir), "services/feed/", "contracts/registry.go", "go.work",
		"contracts/schemas/feed.feed.recorded.v1.json")
	for _, f := range []string{"services/billing/cmd/billing/run.go", "services/billing/api/openapi.yaml",
		"services/ledger/cmd/ledger/run.go", "contracts/schemas/ledger.ledger.recorded.v1.json",
		"services/feed/cmd/feed/run.go", "services/feed/api/openapi.yaml", "contracts/schemas/feed.feed.recorded.v1.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("make service wrote no %s: %v", f, err)
		}
	}
	if out, err := exec.Command("gofmt", "-l", dir).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("gofmt -l after make service: %v\n%s", err, out)
	}

	t.Run("every module builds, vets and passes its fast tests", func(t *testing.T) {
		pkgs := modulePatterns(t, dir)
		runIn(t, dir, "go", append([]string{"build"}, pkgs...)...)
		runIn(t, dir, "go", append([]string{"vet"}, pkgs...)...)
		// The platform packages below need neither PostgreSQL nor RabbitMQ; the
		// rest of the platform's tests run on the servers and take minutes. go vet
		// has just checked them all, so go test does not again (-vet=off).
		runIn(t, dir, "go", "test", "-count=1", "-vet=off", "./e2e/internal/boundaries", "./contracts/...",
			"./platform/backoff/...", "./platform/cli/...", "./platform/config/...",
			"./platform/inbox/msgkey/...", "./platform/logging/...", "./services/billing/...", "./services/ledger/...", "./services/feed/...")
	})

	t.Run("the deploy files follow the registry", func(t *testing.T) {
		runIn(t, filepath.Join(dir, "e2e"), "go", "test", "-count=1", "-run",
			"FollowsTheRegistry|TestKubernetesManifests|TestComposeHA|TestKubernetesHA", ".", "./cmd/demo")
	})

	// The fork's demo runs every service of its registry, feed's serve and relay
	// included. The auditor counts every event of every producer's outbox, ledger's
	// own included (ledger receives it), as unaccounted until each consumer that
	// receives it has processed it: so billing and ledger processed every event they
	// are bound to, and ledger's relay published its own.
	t.Run("make demo passes with billing, ledger and feed", func(t *testing.T) {
		t.Cleanup(func() { dropDemo(t, name, "billing", "ledger", "feed") })
		out := runIn(t, dir, "make", "--no-print-directory", "demo")
		for _, want := range []string{"lost = 0, unaccounted = 0", "events processed by billing", "events processed by ledger",
			"unaccounted: order 0, stock 0, shipping 0, billing 0, ledger 0", "feed-relay"} {
			if !strings.Contains(out, want) {
				t.Errorf("the fork's make demo does not print %q:\n%s", want, out)
			}
		}
	})
}

// dropDemo removes what the fork's make demo leaves on the servers (for a look
// afterwards) where the demo's defaults put it: a database demo_<database> for
// each service of the registry and each added one (its database named as
// itself), and the vhost <project>-demo.
func dropDemo(t *testing.T, project string, added ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, svc := range contracts.Services() {
		added = append(added, svc.Database)
	}
	for _, db := range added {
		testkit.DropDatabase(t, "postgres://postgres@localhost:5432/postgres?sslmode=disable", "demo_"+db)
	}
	amqpURL := os.Getenv("AMQP_URL")
	if amqpURL == "" {
		amqpURL = "amqp://guest:guest@localhost:5672/"
	}
	admin, err := rabbitadmin.Detect(ctx, amqpURL)
	if err == nil {
		err = admin.DeleteVhost(ctx, project+"-demo")
	}
	if err != nil {
		t.Errorf("delete the fork's demo vhost: %v", err)
	}
}

// modulePatterns is ./<module>/... for every module of the fork's go.work.
func modulePatterns(t *testing.T, dir string) []string {
	t.Helper()
	work, err := os.ReadFile(filepath.Join(dir, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*\./(\S+)\s*$`).FindAllStringSubmatch(string(work), -1) {
		pkgs = append(pkgs, "./"+m[1]+"/...")
	}
	for _, want := range []string{"./services/billing/...", "./services/ledger/...", "./services/feed/..."} {
		if !slices.Contains(pkgs, want) {
			t.Fatalf("go.work of the fork lists %v, without %s", pkgs, want)
		}
	}
	return pkgs
}

// file is what snapshot keeps of a file: its SHA-256 and its first line.
type file struct {
	sum   [sha256.Size]byte
	first string
}

// snapshot returns every file under dir by its slash-separated path.
func snapshot(t *testing.T, dir string) map[string]file {
	t.Helper()
	files := map[string]file{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		first, _, _ := bytes.Cut(b, []byte("\n"))
		files[filepath.ToSlash(rel)] = file{sha256.Sum256(b), string(first)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// checkEdits fails t for every file written, changed or removed between the snapshots
// before and after that is not under service (a folder, ending in /), not one of allowed,
// and not generated (its first line, before or after, says "make generate").
func checkEdits(t *testing.T, before, after map[string]file, service string, allowed ...string) {
	t.Helper()
	var edited []string
	names := map[string]bool{}
	for rel := range before {
		names[rel] = true
	}
	for rel := range after {
		names[rel] = true
	}
	for _, rel := range slices.Sorted(maps.Keys(names)) {
		b, hadIt := before[rel]
		a, hasIt := after[rel]
		if hadIt && hasIt && a.sum == b.sum || strings.HasPrefix(rel, service) || slices.Contains(allowed, rel) {
			continue
		}
		if hasIt && strings.Contains(a.first, "make generate") || !hasIt && strings.Contains(b.first, "make generate") {
			continue
		}
		edited = append(edited, rel)
	}
	if len(edited) > 0 {
		t.Errorf("make service edited files besides %s, %s and generated ones:\n%s",
			service, strings.Join(allowed, ", "), strings.Join(edited, "\n"))
	}
}

// TestRefuses: a bad name or kind, a name of the registry, of its
// databases, of services/ or of a Go package the service imports, before writing.
func TestRefuses(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)
	for _, o := range []Options{
		{Name: "Billing", Kind: "consumer"},
		{Name: "billing", Kind: "publisher"},
		{Name: "shipping", Kind: "consumer"},
		{Name: "orders", Kind: "consumer"},   // order's database
		{Name: "auditor", Kind: "consumer"},  // services/auditor
		{Name: "postgres", Kind: "consumer"}, // a service of docker-compose.yml
		{Name: "type", Kind: "consumer"},     // a Go keyword
		{Name: "string", Kind: "both"},       // a predeclared identifier
		{Name: "inbox", Kind: "consumer"},    // a package the service imports
		{Name: "events", Kind: "both"},       // one of its own
		{Name: "store", Kind: "producer"},    // one of a producer's
		{Name: "ctx", Kind: "consumer"},      // a name the service's code uses for its own
		{Name: "r", Kind: "producer"},
		{Name: "tx", Kind: "both"},
		{Name: "init", Kind: "consumer"},      // Go's
		{Name: "record", Kind: "consumer"},    // its handler's function
		{Name: "guest", Kind: "consumer"},     // the broker's administrator
		{Name: "app", Kind: "consumer"},       // its queue would be app.events
		{Name: "amqx", Kind: "consumer"},      // the broker reserves amq.
		{Name: "namespace", Kind: "consumer"}, // deploy/k8s/namespace.yaml
		{Name: strings.Repeat("b", 40), Kind: "consumer"},
	} {
		o.Root = root
		var u usageError
		if _, err := Add(o); !errors.As(err, &u) {
			t.Errorf("Add(%+v) = %v, want a refusal", o, err)
		}
	}
	if after := snapshot(t, root); !maps.Equal(before, after) {
		t.Error("a refused Add wrote to the repository")
	}
	empty := t.TempDir()
	if _, err := Add(Options{Name: "billing", Kind: "consumer", Root: empty}); err == nil {
		t.Error("Add in an empty folder = nil, want an error")
	}
	if entries, _ := os.ReadDir(empty); len(entries) > 0 {
		t.Error("Add wrote to an empty folder")
	}
}

// runIn runs a command in dir with -trimpath added to GOFLAGS (so that the build
// cache serves later forks in other temporary folders), failing t with its
// output when it fails, and returns its output.
func runIn(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"), "GOWORK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	t.Logf("%s %s: %s", name, strings.Join(args, " "), time.Since(start).Round(time.Second))
	return string(out)
}

// TestPlainNamesPass: the names the docs use pass every check Add makes before
// writing, for each kind.
func TestPlainNamesPass(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"billing", "ledger", "feed", "sink"} {
		for _, kind := range []string{"consumer", "producer", "both"} {
			d, err := plan(Options{Name: name, Kind: kind, Root: root})
			if err != nil {
				t.Fatalf("plan(%s, %s): %v", name, kind, err)
			}
			files, err := render(d)
			if err == nil {
				err = refuseImportedName(d.Name, files)
			}
			if err == nil {
				err = refuseTemplateIdent(d)
			}
			if err != nil {
				t.Errorf("NAME=%s KIND=%s: %v", name, kind, err)
			}
		}
	}
}
