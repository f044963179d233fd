package main

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMakeServiceInAFork forks the repository (make fork), adds a billing
// consumer there (make service NAME=billing), and in the fork runs billing's own
// tests, the tests that hold the deploy files and the AsyncAPI document to the
// registry, and the end-to-end check in which the auditor reports every consumer,
// billing included, processing every event of an order.
func TestMakeServiceInAFork(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	old, err := workspaceModule(root)
	if err != nil {
		t.Fatal(err)
	}
	name := "acme" // zeta when this is a fork named acme already
	if path.Base(old) == name {
		name = "zeta"
	}
	dir := filepath.Join(t.TempDir(), name)
	runIn(t, root, "make", "--no-print-directory", "fork", "MODULE=github.com/"+name+"/orders", "NAME="+name, "DIR="+dir)
	runIn(t, dir, "make", "--no-print-directory", "service", "NAME=billing")
	for _, f := range []string{"services/billing/cmd/billing/run.go", "deploy/k8s/billing.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("make service wrote no %s: %v", f, err)
		}
	}
	runIn(t, filepath.Join(dir, "services/billing"), "go", "vet", "./...")
	runIn(t, filepath.Join(dir, "services/billing"), "go", "test", "-count=1", "./...")
	runIn(t, filepath.Join(dir, "contracts"), "go", "test", "-count=1", "./...")
	runIn(t, filepath.Join(dir, "e2e"), "go", "test", "-count=1", "-run",
		"FollowsTheRegistry|TestKubernetesManifests|TestAuditorSeesEveryConsumerReceiveEveryEvent", ".")
}

// TestRefuses: a bad name or kind and a service the registry has, before writing.
func TestRefuses(t *testing.T) {
	for _, o := range []Options{
		{Name: "Billing", Kind: "consumer", Like: "shipping"},
		{Name: "billing", Kind: "publisher", Like: "shipping"},
		{Name: "shipping", Kind: "consumer", Like: "shipping"},
		{Name: "billing", Kind: "consumer", Like: "nobody"},
	} {
		o.Root = t.TempDir()
		if _, err := Add(o); err == nil {
			t.Errorf("Add(%+v) = nil, want a refusal", o)
		}
		if entries, _ := os.ReadDir(o.Root); len(entries) > 0 {
			t.Errorf("Add(%+v) wrote to %s", o, o.Root)
		}
	}
}

// runIn runs a command in dir with -trimpath added to GOFLAGS (so that the build
// cache serves later forks in other temporary folders), failing t with its
// output when it fails.
func runIn(t *testing.T, dir, name string, args ...string) {
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
}
