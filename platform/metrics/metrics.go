// Package metrics creates the Prometheus registry a binary owns; components register their
// collectors on it through a prometheus.Registerer, never on the default registry.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a fresh registry holding the Go runtime collector (go_*) and the
// process collector (process_*). Serve it with httpx.NewRouter's /metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	// Registering two distinct standard collectors on a new registry cannot conflict.
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Register registers c on reg and returns it or, when reg already holds an equal
// collector (same descriptors, as when a second component of one binary builds the same
// metrics), that earlier collector, so both feed one series. Any other failure (a
// different collector under the same name) is returned wrapped, with c unregistered.
// A nil reg registers nothing and returns c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register metric: %w", err)
}
