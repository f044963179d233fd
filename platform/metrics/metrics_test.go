package metrics_test

import (
	"strings"
	"testing"

	"example.com/shop/platform/metrics"
)

func TestNewRegistryHasGoAndProcessCollectors(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var goSeen, processSeen bool
	for _, f := range families {
		goSeen = goSeen || strings.HasPrefix(f.GetName(), "go_")
		processSeen = processSeen || strings.HasPrefix(f.GetName(), "process_")
	}
	if !goSeen || !processSeen {
		t.Errorf("go_* seen %v, process_* seen %v; want both", goSeen, processSeen)
	}

	// Two registries are independent: no shared default state.
	if metrics.NewRegistry() == reg {
		t.Error("NewRegistry returned the same registry twice")
	}
}
