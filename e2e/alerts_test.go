package e2e_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAlertRules checks deploy/prometheus/alerts.yaml with promtool (Debian package
// prometheus; .ci/run installs it) and runs its unit tests,
// deploy/prometheus/alerts_test.yaml, which show every alert firing on a bad series
// and silent on a healthy one. Without promtool on PATH the test fails.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not on PATH (%v): install it (apt-get install prometheus) to test the alert rules", err)
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
