package main

import (
	"strings"
	"testing"
)

// TestAddEntry: the entry becomes the last element of the slice Services returns, wherever
// its closing brace is, and the file comes out gofmt'ed; a file without that literal is
// refused.
func TestAddEntry(t *testing.T) {
	const elem = "// b does b.\n{Name: \"b\"},\n"
	for _, tc := range []struct{ name, lit, want string }{
		{"brace on its own line", "[]Service{\n\t\t{Name: \"a\"},\n\t}", "[]Service{\n\t\t{Name: \"a\"},\n\t\t// b does b.\n\t\t{Name: \"b\"},\n\t}"},
		{"brace after the last element", "[]Service{{Name: \"a\"}}", "[]Service{{Name: \"a\"},\n\t\t// b does b.\n\t\t{Name: \"b\"},\n\t}"},
		{"empty", "[]Service{}", "[]Service{\n\t\t// b does b.\n\t\t{Name: \"b\"},\n\t}"},
	} {
		src := "package contracts\n\ntype Service struct{ Name string }\n\nfunc Services() []Service {\n\treturn " + tc.lit + "\n}\n"
		got, err := addEntry([]byte(src), elem)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if want := strings.Replace(src, tc.lit, tc.want, 1); string(got) != want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, got, want)
		}
	}
	if _, err := addEntry([]byte("package contracts\n\nfunc Services() []string { return nil }\n"), elem); err == nil {
		t.Error("addEntry without a []Service literal = nil error")
	}
}
