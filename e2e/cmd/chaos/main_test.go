package main

import (
	"io"
	"testing"
)

func TestParse(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		name    string
		args    []string
		env     map[string]string
		seed    uint64
		orders  int
		wantErr bool
	}{
		{name: "defaults", orders: 10000},
		{name: "CHAOS_SEED", env: map[string]string{"CHAOS_SEED": "42"}, seed: 42, orders: 10000},
		{name: "flag beats CHAOS_SEED", args: []string{"-seed", "7", "-orders", "50"}, env: map[string]string{"CHAOS_SEED": "42"}, seed: 7, orders: 50},
		{name: "bad CHAOS_SEED", env: map[string]string{"CHAOS_SEED": "x"}, wantErr: true},
		{name: "no orders", args: []string{"-orders", "0"}, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := parse(c.args, env(c.env), io.Discard)
			if c.wantErr {
				if err == nil {
					t.Fatalf("parse = %+v, want an error", s)
				}
				return
			}
			if err != nil || s.seed != c.seed || s.orders != c.orders {
				t.Fatalf("parse = %+v, %v; want seed %d, orders %d", s, err, c.seed, c.orders)
			}
		})
	}
}

// TestKindsHoldWithinTheirRange checks the fault catalogue: unique names,
// durations in order, each with a way to raise it.
func TestKindsHoldWithinTheirRange(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range kinds() {
		if seen[k.name] || k.apply == nil || k.min > k.max {
			t.Errorf("fault %q: duplicate, no apply, or min %s > max %s", k.name, k.min, k.max)
		}
		seen[k.name] = true
	}
}
