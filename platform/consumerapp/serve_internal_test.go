package consumerapp

import (
	"context"
	"slices"
	"testing"
	"time"

	"example.com/shop/contracts"
)

// TestReadinessChecksFailUntilConnected: serve's /readyz names the database, both
// broker connections and the consumer, and none passes before it is connected.
func TestReadinessChecksFailUntilConnected(t *testing.T) {
	d, err := Service{Name: contracts.ConsumerStock}.newDeps(ServeConfig{RetryDelays: []time.Duration{time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	var names []string
	for _, c := range d.checks() {
		names = append(names, c.Name)
		if err := c.Fn(context.Background()); err == nil {
			t.Errorf("check %s passes before anything is connected", c.Name)
		}
	}
	if want := []string{"postgres", "rabbitmq", "rabbitmq_retry", "consumer"}; !slices.Equal(names, want) {
		t.Errorf("checks %v, want %v", names, want)
	}
}
