package main

import (
	"strings"
	"text/template"
)

// funcs are the functions the templates may call, besides text/template's own.
func funcs() template.FuncMap {
	return template.FuncMap{
		"header": Header,
		"upper":  strings.ToUpper,
		"title":  title,
		"join":   strings.Join,
		"purge":  newPurgeJob,
		// deploy/rabbitmq/definitions.json (broker.go)
		"rabbitHash": rabbitHash,
		"jsonRegexp": jsonRegexp,
		"jsonHeader": jsonHeader,
		// the alert rules and the dashboard (monitor.go)
		"alertRules":    alertRules,
		"indentLines":   indentLines,
		"dashboardRows": dashboardRows,
		// contracts/asyncapi.yaml (asyncapi.go)
		"camel":      camel,
		"eventTitle": eventTitle,
		// the compose files and Prometheus' targets (compose.go)
		"composeRelays": composeRelays,
	}
}
