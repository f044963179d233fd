// Package metrics creates the Prometheus registry a binary owns; components register their
// collectors on it through a prometheus.Registerer, never on the default registry.
package metrics

import (
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
