package boundaries_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const (
	root      = "example.com/shop/"
	contracts = root + "contracts"
	platform  = root + "platform"
	services  = root + "services/"
)

// owner names the part of the layout a package belongs to: "contracts",
// "platform", "services/<name>", "e2e". An external test package
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
		for _, imp := range fields[1:] {
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
