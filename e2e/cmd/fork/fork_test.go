package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"example.com/shop/e2e/internal/project"
)

// target is the module path and name the tests fork to: zeta, or acme when the
// repository is a fork named zeta already.
func target(t *testing.T, root string) (module, name string) {
	t.Helper()
	old, err := project.Name(root)
	if err != nil {
		t.Fatal(err)
	}
	name = "zeta"
	if old == name {
		name = "acme"
	}
	return "github.com/" + name + "/orders", name
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

// The fork that e2e/cmd/service's TestForkThenAddAService makes is searched, built,
// vetted and tested there, once, with a service added.

// TestForkRefuses: a bad module path or name, a folder that is not empty or
// inside the repository, each before writing. A name the code uses as a Go
// identifier ("orders") is taken: the old name is none, so the two never meet.
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
		{Options{Module: testModule, Name: testName, Dir: full}, "not empty"},
		{Options{Module: testModule, Name: testName, Dir: filepath.Join(root, "inside")}, "inside the repository"},
		{Options{Module: testModule, Name: testName, Without: []string{"postgres"}}, "no option of that name"},
		{Options{Module: testModule, Name: testName, Without: []string{"../platform"}}, "folder name of integrations/"},
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
	if _, err := Fork(Options{Source: root, Module: testModule, Name: "orders", Dir: filepath.Join(t.TempDir(), "fork")}); err != nil {
		t.Errorf("Fork with NAME orders: %v", err)
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
