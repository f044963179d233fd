package bench

import (
	"strings"
	"testing"
)

// TestUnjudgedGoalIsNeitherMetNorMissed checks that a goal the run could not
// judge (a busy machine before the latency run) is reported with no verdict
// and the reason in its note, and that the other goals keep theirs.
func TestUnjudgedGoalIsNeitherMetNorMissed(t *testing.T) {
	var c collector
	c.set("latency_notify_p50", 40, "200 orders")
	c.set("latency_notify_p99", 90, "200 orders")
	c.unjudge("latency_notify_p50", "other work kept 1.20 of 2 CPUs busy")
	got := map[string]Result{}
	for _, r := range c.ordered(DefaultSizes()) {
		got[r.Name] = r
	}
	p50, p99 := got["latency_notify_p50"], got["latency_notify_p99"]
	if p50.Met != nil || !strings.Contains(p50.Note, "goal not judged: other work kept 1.20") || p50.Goal == "" {
		t.Errorf("p50: met %v, goal %q, note %q; want no verdict, the goal and the reason", p50.Met, p50.Goal, p50.Note)
	}
	if p99.Met == nil || *p99.Met {
		t.Errorf("p99 = 90 ms against a goal under 25: met %v, want false", p99.Met)
	}
	var table strings.Builder
	if err := WriteTable(&table, c.ordered(DefaultSizes())); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "not judged") {
		t.Errorf("table does not say the goal was not judged:\n%s", table.String())
	}
}
