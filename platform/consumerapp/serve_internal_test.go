package consumerapp

import (
	"context"
	"slices"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/serveapp"
)

// TestReadinessChecksFailUntilConnected: in front of the API, the consumer's
// /readyz checks name both broker connections and the consumer, and none passes
// before it is connected (serveapp.Run adds "postgres" before them); behind an
// API it adds none.
func TestReadinessChecksFailUntilConnected(t *testing.T) {
	c := Service{Name: contracts.ConsumerStock}.Consumer(nil)
	cfg := ConsumeConfig{RetryDelays: []time.Duration{time.Second}}
	d, err := c.mount(cfg, &serveapp.API{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var names []string
	for _, c := range d.Checks() {
		names = append(names, c.Name)
		if err := c.Fn(context.Background()); err == nil {
			t.Errorf("check %s passes before anything is connected", c.Name)
		}
	}
	if want := []string{"rabbitmq", "rabbitmq_retry", "consumer"}; !slices.Equal(names, want) {
		t.Errorf("checks %v, want %v", names, want)
	}
	behind, err := c.Behind(cfg, &serveapp.API{})
	if err != nil {
		t.Fatal(err)
	}
	if checks := behind.Checks(); checks != nil {
		t.Errorf("behind the API: checks %v, want none", checks)
	}
}
