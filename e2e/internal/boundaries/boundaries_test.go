package boundaries_test

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"example.com/shop/e2e/internal/boundaries"
)

const (
	root      = "example.com/shop/"
	contracts = root + "contracts"
	platform  = root + "platform"
	services  = root + "services/"
)

// owner names the part of the layout a package belongs to: "contracts",
// "platform", "services/<name>", "integrations", "testkit", "e2e". An external test package
// ("<path>_test") and a test main ("<path>.test") belong to the part of
// <path>.
func owner(pkg string) string {
	pkg = strings.TrimSuffix(strings.TrimSuffix(pkg, ".test"), "_test")
	rest := strings.TrimPrefix(pkg, root)
	parts := strings.SplitN(rest, "/", 3)
	if parts[0] == "services" && len(parts) > 1 {
		return "services/" + parts[1]
	}
	return parts[0]
}

// broker names the packages that talk to the broker; an event handler package
// imports none of them.
var broker = []string{root + "platform/amqp", "github.com/rabbitmq/amqp091-go"}

// sqlOrTransport names packages a domain package (services/<svc>/internal/<svc>)
// must not import: SQL, HTTP, the broker, and the platform.
var sqlOrTransport = []string{"github.com/jackc/pgx", "net/http", "github.com/go-chi/", "github.com/rabbitmq/", root + "platform"}

// handlerPkg matches a service's event handler package, domainPkg its domain package.
var (
	handlerPkg = regexp.MustCompile(`^` + regexp.QuoteMeta(services) + `[^/]+/internal/events$`)
	domainPkg  = regexp.MustCompile(`^` + regexp.QuoteMeta(services) + `([^/]+)/internal/([^/]+)$`)
)

func hasPrefixIn(imp string, prefixes []string) bool {
	for _, p := range prefixes {
		if imp == p || strings.HasPrefix(imp, strings.TrimSuffix(p, "/")+"/") || strings.HasSuffix(p, "/") && strings.HasPrefix(imp, p) {
			return true
		}
	}
	return false
}

func TestImportBoundaries(t *testing.T) {
	out, err := exec.Command("go", "list", "-test", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, root+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := fields[0]
		from := owner(pkg)
		// The package itself, not a test variant ("p [p.test]", "p_test", "p.test"),
		// is what ships: its own imports follow the handler and domain rules.
		product := len(fields) < 2 || !strings.HasPrefix(fields[1], "[")
		product = product && !strings.HasSuffix(pkg, "_test") && !strings.HasSuffix(pkg, ".test")
		for _, imp := range fields[1:] {
			if product && handlerPkg.MatchString(pkg) && hasPrefixIn(imp, broker) {
				t.Errorf("%s imports %s: an event handler imports no broker package (the inbox decides retry or dead letter)", pkg, imp)
			}
			if m := domainPkg.FindStringSubmatch(pkg); product && m != nil && m[1] == m[2] && hasPrefixIn(imp, sqlOrTransport) {
				t.Errorf("%s imports %s: a domain package holds no SQL and no transport", pkg, imp)
			}
			if !strings.HasPrefix(imp, root) {
				continue
			}
			to := owner(imp)
			checked++
			switch {
			case from == "contracts" && to != "contracts":
				t.Errorf("%s imports %s: contracts must import no other part", pkg, imp)
			case from == "platform" && strings.HasPrefix(to, "services/"):
				t.Errorf("%s imports %s: platform must not import a service", pkg, imp)
			case from == "platform" && to == "integrations":
				t.Errorf("%s imports %s: the core (platform) imports no option (integrations/, docs/adr/0011)", pkg, imp)
			case to == "testkit" && product && from != "testkit" && from != "e2e" && !strings.HasSuffix(pkg, "test"):
				t.Errorf("%s imports %s: only tests and test support (a package named *test) import the test kit (docs/adr/0011)", pkg, imp)
			case strings.HasPrefix(from, "services/") && strings.HasPrefix(to, "services/") && from != to:
				t.Errorf("%s imports %s: services must not import each other", pkg, imp)
			case to == "e2e" && from != "e2e":
				t.Errorf("%s imports %s: nothing may import the end-to-end suite", pkg, imp)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no project imports seen: the check checked nothing")
	}
}

// TestPlatformNamesNoService: no product source file of platform/ names a service of
// the shop in an identifier or a string (boundaries.ShopNames); platform moves
// envelopes and runs handlers for any service.
func TestPlatformNamesNoService(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "platform")
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		found, err := boundaries.ShopNames(path, src, strings.TrimSuffix(root, "/"))
		for _, f := range found {
			t.Errorf("%s: platform must not name a service", f)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("read %d platform files: the check checked nothing", files)
	}
}

// TestShopNamesFindsAService proves the name check can fail: it finds a service in an
// identifier and in a string, and lets the contract, comments and ORDER BY pass.
func TestShopNamesFindsAService(t *testing.T) {
	src := `package p

import "example.com/shop/contracts"

// Comments may say stock and shipping.
const DefaultStockURL = "postgres://localhost/x"
var q = "shipping.events"
var sql = "SELECT 1 ORDER BY id"
var ok = contracts.QueueStock
var p = contracts.OrderPlaced{OrderID: id, Lines: nil}
func auditorName() string { return "x" }
var tracer = "github.com/acme/orders/platform/amqp"
`
	found, err := boundaries.ShopNames("p.go", []byte(src), "github.com/acme/orders")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(found, "\n")
	for _, want := range []string{"identifier DefaultStockURL", `string "shipping.events"`, "identifier auditorName"} {
		if !strings.Contains(got, want) {
			t.Errorf("found:\n%s\nwant %s", got, want)
		}
	}
	if len(found) != 3 {
		t.Errorf("found %d names, want 3:\n%s", len(found), got)
	}
}
