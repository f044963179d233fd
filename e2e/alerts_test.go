package e2e_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAlertRules checks deploy/prometheus/alerts.yaml with promtool (on PATH; make
// test installs Debian's prometheus package for it) and runs its unit tests,
// deploy/prometheus/alerts_test.yaml, which show every alert firing on a bad series
// and silent on a healthy one. Without promtool the test fails.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("no promtool on PATH (%v): run make tools, or apt-get install prometheus", err)
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
