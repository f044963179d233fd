package bench

import (
	"fmt"
	"strconv"
	"sync"
)

// Result is one measured number, as written to bench/out/latest.json.
type Result struct {
	// Name identifies the measurement, e.g. "relay_pipelined".
	Name string `json:"name"`
	// Value is the measured number, in Unit.
	Value float64 `json:"value"`
	// Unit is "msgs/s", "events/s", "tx/s", "orders/s", "ms", "x" (a factor),
	// "MiB", "cores" (CPUs kept busy) or "%".
	Unit string `json:"unit"`
	// Baseline names the result this one is compared with ("" when none).
	Baseline string `json:"baseline"`
	// Ratio is Value divided by the baseline's value; null without a
	// baseline.
	Ratio *float64 `json:"ratio"`
	// Goal is the target from the project's issues, e.g. "ratio >= 0.5"
	// ("" when none).
	Goal string `json:"goal,omitempty"`
	// Met reports whether Goal was reached; absent without a goal, and when
	// the run could not judge it (Note says why: a busy machine).
	Met *bool `json:"met,omitempty"`
	// Note says how the number was obtained, in a few words.
	Note string `json:"note,omitempty"`
}

// goal is a target on a result's value or on its ratio to the baseline.
type goal struct {
	onRatio bool
	op      string // ">=", "<" or "<="
	target  float64
}

func (g goal) String() string {
	what := "value"
	if g.onRatio {
		what = "ratio"
	}
	return fmt.Sprintf("%s %s %s", what, g.op, strconv.FormatFloat(g.target, 'f', -1, 64))
}

func (g goal) met(value float64, ratio *float64) *bool {
	v := value
	if g.onRatio {
		if ratio == nil {
			return nil
		}
		v = *ratio
	}
	var ok bool
	switch g.op {
	case "<":
		ok = v < g.target
	case "<=":
		ok = v <= g.target
	default:
		ok = v >= g.target
	}
	return &ok
}

// spec describes one measurement: its name, unit, baseline, goal and the
// chart panel it is drawn in ("" for none).
type spec struct {
	name, unit, baseline string
	goal                 *goal
	panel                string
	label                string // bar label in the chart
	// optional is set for the numbers of one rate of the maxrate search,
	// which exist only for the rates the search reached; zero is a valid
	// value for them (a CPU time below one clock tick per order).
	optional bool
}

// Chart panels.
const (
	panelThroughput = "Throughput (per second, higher is better)"
	panelGrowth     = "Throughput as the tables grow (per second)"
	panelNotify     = "Place -> reservation visible, LISTEN/NOTIFY wake-up (ms)"
	panelPoll       = "Place -> reservation visible, polling every 1 s (ms)"
)

func brokerMultiName(s Sizes) string  { return fmt.Sprintf("broker_%d_publishers", s.BrokerPublishers) }
func rawDBName(workers int) string    { return fmt.Sprintf("db_raw_tx_w%d", workers) }
func consumerName(workers int) string { return fmt.Sprintf("stock_consumer_w%d", workers) }
func tracedConsumerName(workers int) string {
	return fmt.Sprintf("stock_consumer_traced_w%d", workers)
}

// The CPU time per message of the broker's ceiling run (RabbitMQ only), and
// per event of one relay process with one partition (the process and its
// PostgreSQL sessions), the relay's own side of relaying.
const (
	cpuBrokerName    = "cpu_ms_per_broker_message"
	cpuRelaySideName = "cpu_ms_per_relayed_event_relay_side"
)

// The stock and shipping consumers with no setting of theirs: rate and CPU
// time per event.
const (
	consumerDefaultsName    = "stock_consumer_defaults"
	cpuStockDefaultsName    = "cpu_ms_per_stock_event_defaults"
	shippingDefaultsName    = "shipping_consumer_defaults"
	cpuShippingDefaultsName = "cpu_ms_per_shipping_event_defaults"
)

func cpuRawName(workers int) string   { return fmt.Sprintf("cpu_ms_per_raw_tx_w%d", workers) }
func cpuStockName(workers int) string { return fmt.Sprintf("cpu_ms_per_stock_event_w%d", workers) }
func growthRelayName(rows int) string { return "growth_relay_at_" + sizeLabel(rows) }
func growthConsumerName(rows int) string {
	return "growth_consumer_at_" + sizeLabel(rows)
}

// sizeLabel writes 10000 as "10k" and 1000000 as "1M".
func sizeLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// specs lists every measurement of a run with the given sizes, in report
// order.
func specs(s Sizes) []spec {
	atLeast := func(t float64) *goal { return &goal{onRatio: true, op: ">=", target: t} }
	out := []spec{
		{name: "broker_1_publisher", unit: "msgs/s", panel: panelThroughput, label: "broker, 1 publisher"},
		{name: brokerMultiName(s), unit: "msgs/s", panel: panelThroughput, label: fmt.Sprintf("broker, %d publishers", s.BrokerPublishers)},
		{name: "broker_ceiling", unit: "msgs/s", label: "broker ceiling"},
		{name: cpuBrokerName, unit: "ms"},
		{name: "relay_one_at_a_time", unit: "events/s", baseline: "broker_ceiling", panel: panelThroughput, label: "relay, one confirm at a time"},
	}
	for _, procs := range relayProcesses {
		for _, parts := range relayPartitions {
			sp := spec{name: relayRunName(parts, procs), unit: "events/s", baseline: "broker_ceiling",
				panel: panelThroughput, label: fmt.Sprintf("relay, %d partition(s), %d process(es)", parts, procs)}
			switch {
			case parts == 1 && procs == 1:
				sp.goal = atLeast(0.75)
			case parts == 4 && procs == 2:
				sp.goal = atLeast(0.9)
			}
			out = append(out, sp)
		}
	}
	out = append(out,
		spec{name: cpuRelaySideName, unit: "ms", baseline: cpuBrokerName, goal: &goal{onRatio: true, op: "<=", target: 0.5}},
		spec{name: "relay_order_violations", unit: "orders", goal: &goal{op: "<", target: 1}},
		spec{name: "relay_pipelined_speedup", unit: "x", goal: &goal{op: ">=", target: 5}},
		spec{name: "relay_pipelined_traced", unit: "events/s", baseline: relayRunName(1, 1), panel: panelThroughput,
			label: "relay, 1 partition, in the bench process, traced"})
	out = append(out, []spec{
		{name: rawDBName(s.DefaultWorkers), unit: "tx/s", panel: panelThroughput, label: fmt.Sprintf("raw database, %d workers", s.DefaultWorkers)},
		{name: consumerName(s.DefaultWorkers), unit: "events/s", baseline: rawDBName(s.DefaultWorkers), goal: atLeast(0.5), panel: panelThroughput, label: fmt.Sprintf("stock consumer, %d workers", s.DefaultWorkers)},
		{name: tracedConsumerName(s.DefaultWorkers), unit: "events/s", baseline: consumerName(s.DefaultWorkers), panel: panelThroughput, label: fmt.Sprintf("stock consumer, %d workers, traced", s.DefaultWorkers)},
		{name: rawDBName(s.TunedWorkers), unit: "tx/s", panel: panelThroughput, label: fmt.Sprintf("raw database, %d workers", s.TunedWorkers)},
		{name: consumerName(s.TunedWorkers), unit: "events/s", baseline: rawDBName(s.TunedWorkers), goal: atLeast(0.5), panel: panelThroughput, label: fmt.Sprintf("stock consumer, %d workers", s.TunedWorkers)},
		{name: consumerDefaultsName, unit: "events/s", panel: panelThroughput, label: "stock consumer, default settings"},
		{name: "stock_consumer_vs_db_ceiling", unit: "x", goal: &goal{op: ">=", target: 2}},
		{name: cpuRawName(s.DefaultWorkers), unit: "ms"},
		{name: cpuStockName(s.DefaultWorkers), unit: "ms", baseline: cpuRawName(s.DefaultWorkers)},
		{name: cpuRawName(s.TunedWorkers), unit: "ms"},
		{name: cpuStockName(s.TunedWorkers), unit: "ms", baseline: cpuRawName(s.TunedWorkers)},
		{name: cpuStockDefaultsName, unit: "ms", baseline: cpuRawName(s.DefaultWorkers)},
		{name: shippingDefaultsName, unit: "events/s", baseline: consumerDefaultsName, panel: panelThroughput, label: "shipping consumer, default settings"},
		{name: cpuShippingDefaultsName, unit: "ms", baseline: cpuStockDefaultsName, goal: &goal{onRatio: true, op: "<=", target: 1}},
		{name: "shipping_consumer_vs_db_ceiling", unit: "x", goal: &goal{op: ">=", target: 2}},
	}...)
	for _, p := range []string{"p50", "p95", "p99"} {
		sp := spec{name: "latency_notify_" + p, unit: "ms", panel: panelNotify, label: p}
		switch p {
		case "p50":
			sp.goal = &goal{op: "<", target: 10}
		case "p99":
			sp.goal = &goal{op: "<", target: 25}
		}
		out = append(out, sp)
	}
	for _, p := range []string{"p50", "p99"} {
		out = append(out, spec{name: "latency_notify_confirmed_" + p, unit: "ms", baseline: "latency_notify_" + p})
	}
	out = append(out,
		spec{name: cpuRelayWakeName("poll", s.LatencyRate), unit: "ms"},
		spec{name: cpuRelayWakeName("notify", s.LatencyRate), unit: "ms", baseline: cpuRelayWakeName("poll", s.LatencyRate),
			goal: &goal{onRatio: true, op: "<=", target: 2}},
		spec{name: cpuPerOrderName("reservation", s.LatencyRate), unit: "ms"},
		spec{name: cpuPerOrderName("confirmed", s.LatencyRate), unit: "ms", baseline: cpuPerOrderName("reservation", s.LatencyRate)})
	for _, stage := range stageNames {
		for _, p := range []string{"p50", "p99"} {
			out = append(out, spec{name: stageName(stage, p), unit: "ms"})
		}
	}
	out = append(out, spec{name: maxRateReservationName, unit: "orders/s", goal: &goal{op: ">=", target: 1000}},
		spec{name: maxRateConfirmedName, unit: "orders/s"})
	for _, rate := range s.MaxRates {
		opt := func(what, unit string) spec { return spec{name: rateName(rate, what), unit: unit, optional: true} }
		out = append(out, opt("p50", "ms"), opt("p99", "ms"), opt("confirmed_p50", "ms"), opt("confirmed_p99", "ms"))
		for _, g := range cpuGroups {
			out = append(out, opt("cpu_"+g, "ms"))
		}
		out = append(out, opt("shop_cores", "cores"), opt("machine_busy_cores", "cores"), opt("idle_pct", "%"))
	}
	for _, p := range []string{"p50", "p95", "p99"} {
		out = append(out, spec{name: "latency_poll_" + p, unit: "ms", baseline: "latency_notify_" + p, panel: panelPoll, label: p})
	}
	first, last := s.GrowthRows[0], s.GrowthRows[len(s.GrowthRows)-1]
	for _, n := range s.GrowthRows {
		sp := spec{name: growthRelayName(n), unit: "events/s", panel: panelGrowth, label: "relay, " + sizeLabel(n) + " rows in outbox"}
		if n != first {
			sp.baseline = growthRelayName(first)
		}
		if n == last {
			sp.goal = atLeast(0.8)
		}
		out = append(out, sp)
	}
	for _, n := range s.GrowthRows {
		sp := spec{name: growthConsumerName(n), unit: "events/s", panel: panelGrowth, label: "consumer, " + sizeLabel(n) + " rows in processed_event"}
		if n != first {
			sp.baseline = growthConsumerName(first)
		}
		if n == last {
			sp.goal = atLeast(0.8)
		}
		out = append(out, sp)
	}
	out = append(out,
		spec{name: "processed_event_uuid_mib_per_1m", unit: "MiB"},
		spec{name: "processed_event_mib_per_1m", unit: "MiB", baseline: "processed_event_uuid_mib_per_1m",
			goal: &goal{onRatio: true, op: "<=", target: 1.5}})
	return out
}

// Names returns the name of every measurement a run with sizes s reports,
// in report order.
func Names(s Sizes) []string {
	var names []string
	for _, sp := range specs(s) {
		names = append(names, sp.name)
	}
	return names
}

// Optional reports whether the measurement name of a run with sizes s exists
// only for some runs: the numbers of one rate of the maxrate search
// (maxrate_<rate>_*: place -> reservation and place -> confirmed percentiles, CPU ms per order by
// process, busy cores, idle share), reported for the rates the search ran up
// to the first one that missed. Zero is a valid value for them.
func Optional(s Sizes, name string) bool {
	for _, sp := range specs(s) {
		if sp.name == name {
			return sp.optional
		}
	}
	return false
}

// rateName is the name of what of the maxrate run at rate orders/s.
func rateName(rate int, what string) string { return fmt.Sprintf("maxrate_%d_%s", rate, what) }

// collector gathers values by name while the run goes on.
type collector struct {
	mu     sync.Mutex
	values map[string]float64
	notes  map[string]string
	// unjudged holds why the goal of a name is neither met nor missed.
	unjudged map[string]string
}

// unjudge leaves the goal of name unjudged (Met absent), for the reason why,
// which the note gives.
func (c *collector) unjudge(name, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unjudged == nil {
		c.unjudged = map[string]string{}
	}
	c.unjudged[name] = why
}

func (c *collector) set(name string, value float64, note string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.values == nil {
		c.values, c.notes = map[string]float64{}, map[string]string{}
	}
	c.values[name] = value
	c.notes[name] = note
}

func (c *collector) get(name string) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.values[name]
	return v, ok
}

// ordered returns the measured results in report order, with ratios and
// goals filled in.
func (c *collector) ordered(s Sizes) []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Result
	for _, sp := range specs(s) {
		v, ok := c.values[sp.name]
		if !ok {
			continue
		}
		r := Result{Name: sp.name, Value: v, Unit: sp.unit, Baseline: sp.baseline, Note: c.notes[sp.name]}
		if b, ok := c.values[sp.baseline]; ok && sp.baseline != "" && b != 0 {
			ratio := v / b
			r.Ratio = &ratio
		}
		if sp.goal != nil {
			r.Goal = sp.goal.String()
			r.Met = sp.goal.met(v, r.Ratio)
			if why, ok := c.unjudged[sp.name]; ok {
				r.Met = nil
				r.Note += "; goal not judged: " + why
			}
		}
		out = append(out, r)
	}
	return out
}
