package chaos

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"example.com/shop/e2e/internal/fault"
)

// TestFailuresNameEveryBrokenPromise checks that a run fails on each thing
// the ledger promises: a whole result has no failure, and each broken field
// alone makes one that names it.
func TestFailuresNameEveryBrokenPromise(t *testing.T) {
	whole := Result{Reserved: "12", Confirmed: "12", Faults: map[string]int{"node-kill": 1}}
	if f := whole.Failures(); len(f) > 0 {
		t.Fatalf("a whole run fails: %v", f)
	}
	for _, c := range []struct {
		name string
		brk  func(*Result)
		want string
	}{
		{"lost", func(r *Result) { r.Ledger.Lost = 1 }, "lost"},
		{"doubled", func(r *Result) { r.Ledger.Doubled = 1 }, "twice"},
		{"not ready", func(r *Result) { r.Ledger.NotReady = []string{"stock-2 exited"} }, "stock-2"},
		{"missing", func(r *Result) { r.Missing = 1 }, "acknowledged"},
		{"waiting", func(r *Result) { r.Waiting = 1 }, "waiting"},
		{"oversold", func(r *Result) { r.Oversold = 1 }, "oversold"},
		{"units", func(r *Result) { r.Reserved = "13" }, "units reserved"},
		{"fault", func(r *Result) { r.FaultErrors = []string{"db-failover: pg_rewind"} }, "pg_rewind"},
	} {
		r := whole
		r.Ledger = fault.Ledger{}
		c.brk(&r)
		f := strings.Join(r.Failures(), "\n")
		if !strings.Contains(f, c.want) {
			t.Errorf("%s: failures %q do not name %q", c.name, f, c.want)
		}
	}
}

// TestLanesAreSeededAndWhole checks the nemesis: unique kinds with a way to
// raise them and holds in order, gaps in order, and the same seed picking the
// same sequence of kinds and holds in each lane.
func TestLanesAreSeededAndWhole(t *testing.T) {
	seen := map[string]bool{}
	for _, l := range laneSpecs() {
		if l.gapMin <= 0 || l.gapMax <= l.gapMin {
			t.Errorf("lane %s: gaps %s..%s", l.name, l.gapMin, l.gapMax)
		}
		for _, k := range l.kinds {
			if k.apply == nil || k.min > k.max {
				t.Errorf("fault %q: no apply, or min %s > max %s", k.name, k.min, k.max)
			}
			seen[k.name] = true
		}
	}
	if len(seen) < 8 {
		t.Errorf("%d kinds of fault, want at least 8: %v", len(seen), seen)
	}
	sequence := func(seed uint64) string {
		var b strings.Builder
		for i, l := range laneSpecs() {
			rng := rand.New(rand.NewPCG(seed, uint64(i+1)))
			for range 20 {
				gap := l.gapMin + time.Duration(rng.Int64N(int64(l.gapMax-l.gapMin)))
				k := l.kinds[rng.IntN(len(l.kinds))]
				b.WriteString(k.name + gap.String() + ";")
			}
		}
		return b.String()
	}
	if sequence(44) != sequence(44) || sequence(44) == sequence(45) {
		t.Error("the seed does not decide the sequence of faults")
	}
}
