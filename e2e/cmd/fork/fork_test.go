package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"example.com/shop/e2e/internal/project"
)

// target is the module path and name the tests fork to (project.ForkTarget).
func target(t *testing.T, root string) (module, name string) {
	t.Helper()
	module, name, err := project.ForkTarget(root)
	if err != nil {
		t.Fatal(err)
	}
	return module, name
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

// TestForkRefuses: a bad module path or name, a name the code uses already (a
// later fork would rename that use with the project), a folder that is not empty
// or inside the repository (through a symbolic link too), each before writing;
// a module path that fails in a go.mod while copying leaves the folder empty.
func TestForkRefuses(t *testing.T) {
	root := repoRoot(t)
	testModule, testName := target(t, root)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(root, link); err != nil {
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
		{Options{Module: testModule, Name: testName, Dir: filepath.Join(link, "inside")}, "inside the repository"},
		{Options{Module: testModule, Name: "orders"}, "Go identifier or a word of a file's path"},
		{Options{Module: testModule, Name: "main"}, "Go identifier or a word of a file's path"},
		{Options{Module: testModule, Name: "test"}, "Go identifier or a word of a file's path"},
		{Options{Module: testModule, Name: "abcdefghijklmnopqrstuvwxyzabcdefghijklmno"}, "40 at most"},
		{Options{Module: "gopkg.in/acme.v1", Name: testName}, "invalid module path"},
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

// TestContent: the new module path stays as given when it holds the old name
// (a fork named acme forked again as github.com/acme/books), and the imports
// are in gofmt's order again when the new path sorts after another.
func TestContent(t *testing.T) {
	for _, tc := range []struct {
		r       rewriter
		in, out string
	}{
		{
			rewriter{oldModule: "github.com/acme/orders", module: "github.com/acme/books", oldName: "acme", name: "zeta"},
			"package x\n\nimport _ \"github.com/acme/orders/platform\" // acme\n",
			"package x\n\nimport _ \"github.com/acme/books/platform\" // zeta\n",
		},
		{
			rewriter{oldModule: "example.com/shop", module: "github.com/zeta/x", oldName: "shop", name: "zeta"},
			"package x\n\nimport (\n\t_ \"example.com/shop/platform\"\n\t_ \"github.com/go-chi/chi/v5\"\n)\n",
			"package x\n\nimport (\n\t_ \"github.com/go-chi/chi/v5\"\n\t_ \"github.com/zeta/x/platform\"\n)\n",
		},
	} {
		got, _, err := tc.r.content("x.go", []byte(tc.in))
		if err != nil || string(got) != tc.out {
			t.Errorf("content(%q) = %q, %v; want %q", tc.in, got, err, tc.out)
		}
	}
	r := rewriter{oldModule: "example.com/shop", module: "example.com/shop/v2", oldName: "shop", name: "shop"}
	if _, _, err := r.content("go.mod", []byte("module example.com/shop/contracts\n\ngo 1.24\n")); err != nil {
		t.Errorf("a module path inside the old one: %v", err)
	}
}
