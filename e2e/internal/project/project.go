// Package project reads what names a checkout of this repository: its module
// path prefix and its project name, which make fork rewrites and make
// service follows.
package project

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/modfile"
)

// Module returns the module path prefix of the repository at root: the module
// path of its contracts module without "/contracts" (example.com/shop). It
// fails when root has no contracts/go.mod or its module path does not end in
// /contracts.
func Module(root string) (string, error) {
	name := filepath.Join(root, "contracts", "go.mod")
	b, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("%s is not this repository: %w", root, err)
	}
	p := modfile.ModulePath(b)
	if !strings.HasSuffix(p, "/contracts") {
		return "", fmt.Errorf("%s: module %q does not end in /contracts", name, p)
	}
	return strings.TrimSuffix(p, "/contracts"), nil
}

// composeNameRE finds the top-level "name:" of docker-compose.yml.
var composeNameRE = regexp.MustCompile(`(?m)^name: *([a-z][a-z0-9]*) *$`)

// Name returns the project name of the repository at root (shop): its compose
// project's name, which a fork rewrites with every other use of the name. It
// is not the module path's last element, which a fork chooses apart
// (github.com/acme/orders named acme). It fails when root has no
// docker-compose.yml or the file has no top-level name.
func Name(root string) (string, error) {
	name := filepath.Join(root, "docker-compose.yml")
	b, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("%s is not this repository: %w", root, err)
	}
	m := composeNameRE.FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf(`%s: no top-level "name: <project>" line`, name)
	}
	return string(m[1]), nil
}

// ForkTarget returns the module path and project name that the tests of make
// fork fork the repository at root to: the first of zeta, acme and kappa that
// is not its name (a fork renames one of these words at most, so two remain
// different), under github.com/<name>/orders unless that is root's module
// path already. zeta comes first because its module path sorts after the
// third-party ones among a file's imports, which the fork must order again.
func ForkTarget(root string) (module, name string, err error) {
	current, err := Name(root)
	if err != nil {
		return "", "", err
	}
	currentModule, err := Module(root)
	if err != nil {
		return "", "", err
	}
	for _, name = range []string{"zeta", "acme", "kappa"} {
		if name != current {
			break
		}
	}
	module = "github.com/" + name + "/orders"
	if module == currentModule {
		module = "github.com/" + name + "/fork"
	}
	return module, name, nil
}
