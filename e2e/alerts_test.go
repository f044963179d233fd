package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAlertRules checks deploy/prometheus/alerts.yaml with promtool (bin/promtool,
// which make test builds; else promtool on PATH) and runs its unit tests,
// deploy/prometheus/alerts_test.yaml, which show every alert firing on a bad series
// and silent on a healthy one. Without promtool the test fails.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool, err := filepath.Abs("../bin/promtool")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(promtool); err != nil {
		if promtool, err = exec.LookPath("promtool"); err != nil {
			t.Fatalf("neither bin/promtool nor promtool on PATH (%v): run make bin/promtool to test the alert rules", err)
		}
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.CommandContext(t.Context(), promtool, args...)
		cmd.Dir = "../deploy/prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
