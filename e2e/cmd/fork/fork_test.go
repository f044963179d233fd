package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// target is the module path and name the tests fork to: acme, or zeta when the
// repository is a fork named acme already.
func target(t *testing.T, root string) (module, name string) {
	t.Helper()
	old, err := workspaceModule(root)
	if err != nil {
		t.Fatal(err)
	}
	name = "acme"
	if path.Base(old) == name {
		name = "zeta"
	}
	return "github.com/" + name + "/orders", name
}

// allowed are the words containing the old name that a fork keeps, each with
// its reason. Everything else that contains it is a leftover.
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

// repoRoot is the repository this package is in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// newFork forks the repository into a fresh temporary folder.
func newFork(t *testing.T) (string, Report) {
	t.Helper()
	mod, name := target(t, repoRoot(t))
	dir := filepath.Join(t.TempDir(), name)
	start := time.Now()
	rep, err := Fork(Options{Source: repoRoot(t), Dir: dir, Module: mod, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forked in %s: %d files changed, %d copied unchanged", time.Since(start).Round(time.Millisecond), len(rep.Changes), rep.Copied)
	return dir, rep
}

// goIn runs the go command in dir with -trimpath added to GOFLAGS (so that the
// build cache serves every later fork in another temporary folder), failing t
// with its output when it fails.
func goIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"), "GOWORK=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in the fork: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("go %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Second))
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
	if len(pkgs) < 5 {
		t.Fatalf("go.work of the fork lists %v", pkgs)
	}
	return pkgs
}

// TestForkIsItsOwn forks the repository (to github.com/acme/orders, acme), then in
// the fork checks gofmt, builds and vets every module, runs the boundary test and the unit
// tests of contracts and of the platform packages that need no server, and
// searches every file for the old module path and project name.
func TestForkIsItsOwn(t *testing.T) {
	dir, rep := newFork(t)
	if rep.OldModule == rep.Module || len(rep.Changes) == 0 {
		t.Fatalf("the fork changed nothing: %+v", rep)
	}

	old := regexp.MustCompile(`(?i)[a-z0-9_]*` + regexp.QuoteMeta(rep.OldName) + `[a-z0-9_]*`)
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
		if bytes.Contains(b, []byte(rep.OldModule)) {
			leftovers = append(leftovers, rel+": the module path "+rep.OldModule)
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

	pkgs := modulePatterns(t, dir)
	goIn(t, dir, append([]string{"build"}, pkgs...)...)
	goIn(t, dir, append([]string{"vet"}, pkgs...)...)
	// The platform packages below need neither PostgreSQL nor RabbitMQ; the
	// rest of the platform's tests run on the servers and take minutes.
	goIn(t, dir, "test", "-count=1", "./e2e/internal/boundaries", "./contracts/...",
		"./platform/backoff/...", "./platform/cli/...", "./platform/config/...",
		"./platform/inbox/msgkey/...", "./platform/logging/...")
}

// TestForkRefuses: a bad module path or name, a folder that is not empty, and a
// name that is a Go identifier of the repository already, each before writing.
func TestForkRefuses(t *testing.T) {
	root := repoRoot(t)
	testModule, testName := target(t, root)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Module: "nodot/orders", Name: testName}, "not a module path"},
		{Options{Module: "", Name: testName}, "MODULE is required"},
		{Options{Module: testModule, Name: "Upper-1"}, "lowercase"},
		{Options{Module: testModule, Name: "func"}, "Go keyword"},
		{Options{Module: testModule, Name: "orders"}, "Go identifier in the repository"},
		{Options{Module: testModule, Name: testName, Dir: full}, "not empty"},
		{Options{Module: testModule, Name: testName, Dir: filepath.Join(root, "inside")}, "inside the repository"},
	} {
		tc.o.Source = root
		if tc.o.Dir == "" {
			tc.o.Dir = filepath.Join(t.TempDir(), "fork")
		}
		_, err := Fork(tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Fork(%+v) = %v, want an error with %q", tc.o, err, tc.want)
		}
		if entries, _ := os.ReadDir(tc.o.Dir); tc.o.Dir != full && len(entries) > 0 {
			t.Errorf("Fork(%+v) wrote to %s before refusing", tc.o, tc.o.Dir)
		}
	}
}

func TestReplaceWord(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"cat-demo cat.json CAT_IMAGE Cat's cat_owner", "dog-demo dog.json DOG_IMAGE Dog's dog_owner"},
		{"Catify newCat catt category", "Catify newCat catt category"},
	} {
		if got, _ := replaceWord([]byte(tc.in), "cat", "dog"); string(got) != tc.want {
			t.Errorf("replaceWord(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	got, n := replaceModule([]byte("import \"example.org/cat/platform\" registry.example.org/cat:1 https://example.org/cat/problems"), "example.org/cat", "github.com/dog/x")
	if want := "import \"github.com/dog/x/platform\" registry.example.org/cat:1 https://github.com/dog/x/problems"; string(got) != want || n != 2 {
		t.Errorf("replaceModule = %q, %d; want %q, 2", got, n, want)
	}
}
