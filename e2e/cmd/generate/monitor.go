package main

import (
	_ "embed"
	"fmt"
	"strings"
)

// alertRulesYAML is the alert rules, the part of deploy/prometheus/alerts.yaml and
// deploy/k8s/prometheusrule.yaml that is not derived from the registry. It is a file of
// its own because its annotations are Prometheus templates, whose {{ }} a template of
// templates/ would take for its own.
//
//go:embed alert-rules.yaml
var alertRulesYAML string

// alertRules returns alert-rules.yaml from its "groups:" line on.
func alertRules() string {
	i := strings.Index(alertRulesYAML, "\ngroups:\n")
	return alertRulesYAML[i+1:]
}

// indentLines puts n spaces before every line of s that is not empty.
func indentLines(n int, s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = strings.Repeat(" ", n) + l
		}
	}
	return strings.Join(lines, "")
}

// dashRow is one row of the dashboard (deploy/grafana/shop.json): a producer's outbox
// and relay, a consumer, or the shared panels ("http"), its panels three to a line.
type dashRow struct {
	// Kind is "relay", "consumer" or "http".
	Kind string
	// S is the producer or consumer; nil for "http".
	S *Service
	// id is the row's panel id, y its place; its panels follow both.
	id, y int
}

// dashPanels is how many panels a row of each kind holds.
var dashPanels = map[string]int{"relay": 6, "consumer": 6, "http": 3}

// dashboardRows returns the dashboard's rows: one per producer, one per consumer, then
// the shared one, each below the one before.
func dashboardRows(m *Model) []dashRow {
	var rows []dashRow
	id, y := 1, 0
	add := func(kind string, s *Service) {
		rows = append(rows, dashRow{Kind: kind, S: s, id: id, y: y})
		n := dashPanels[kind]
		id += 1 + n
		y += 1 + 8*((n+2)/3)
	}
	for i := range m.Producers {
		add("relay", &m.Producers[i])
	}
	for i := range m.Consumers {
		add("consumer", &m.Consumers[i])
	}
	add("http", nil)
	return rows
}

// ID is the id of the row's k-th panel, the row itself being panel 0.
func (r dashRow) ID(k int) int { return r.id + k }

// Grid is the gridPos of the row's k-th panel as JSON: the row a full-width line, its
// panels 8 high and a third of the width, three to a line.
func (r dashRow) Grid(k int) string {
	if k == 0 {
		return fmt.Sprintf(`{"h": 1, "w": 24, "x": 0, "y": %d}`, r.y)
	}
	return fmt.Sprintf(`{"h": 8, "w": 8, "x": %d, "y": %d}`, 8*((k-1)%3), r.y+1+8*((k-1)/3))
}
