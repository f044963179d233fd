package main

import (
	"strings"
	"testing"

	"example.com/shop/contracts"
)

// TestValidate: the registry passes; each registry below, the current one with one
// change, is refused with an error naming what is taken twice.
func TestValidate(t *testing.T) {
	t.Parallel()
	if err := Validate(contracts.Services(), "8085"); err != nil {
		t.Fatalf("the registry is refused: %v", err)
	}
	consumer := func(name, db, addr string) contracts.Service {
		return contracts.Service{Name: name, Database: db, HTTPAddr: addr, Receives: []string{contracts.EventOrderPlaced}}
	}
	// with returns the registry with edit applied to the service called name, or with
	// add appended when name is "".
	with := func(name string, edit func(*contracts.Service), add ...contracts.Service) []contracts.Service {
		ss := contracts.Services()
		for i := range ss {
			if ss[i].Name == name {
				edit(&ss[i])
			}
		}
		return append(ss, add...)
	}
	none := func(*contracts.Service) {}
	for _, tc := range []struct {
		name     string
		services []contracts.Service
		want     string
	}{
		{"a service named as another's relay user", with("", none, consumer("stock-relay", "stockrelay", ":8090")),
			"broker user stock-relay is service stock's"},
		{"a producer whose relay user is another service's name", with("", none,
			contracts.Service{Name: "billing", Database: "billing", HTTPAddr: ":8090", RelayAddr: ":8091",
				Publishes: []string{"billing.invoice.sent.v1"}, Receives: []string{contracts.EventOrderPlaced}},
			consumer("billing-relay", "billingrelay", ":8092")),
			"broker user billing-relay is service billing's"},
		{"a service named auditor", with("", none, consumer("auditor", "audit", ":8090")),
			"broker user auditor is the deploy files'"},
		{"a service named guest", with("", none, consumer("guest", "guestdb", ":8090")),
			"broker user guest is the deploy files'"},
		{"an AppRole equal to another service's role", with("shipping", func(s *contracts.Service) { s.AppRole = "stock_app" }),
			"PostgreSQL role stock_app is service stock's"},
		{"an AppRole equal to another service's maintenance role", with("shipping", func(s *contracts.Service) { s.AppRole = "order_maintenance" }),
			"PostgreSQL role order_maintenance is service order's"},
		{"an AppRole postgres", with("shipping", func(s *contracts.Service) { s.AppRole = "postgres" }),
			"PostgreSQL role postgres is the deploy files'"},
		{"an AppRole auditor", with("shipping", func(s *contracts.Service) { s.AppRole = "auditor" }),
			"PostgreSQL role auditor is the deploy files'"},
		{"a role PostgreSQL keeps", with("shipping", func(s *contracts.Service) { s.AppRole = "pg_monitor" }),
			"starts with pg_"},
		{"a name whose roles another's dash makes", with("", none, consumer("stock-app", "stockapp", ":8090"),
			contracts.Service{Name: "stock_app", Database: "stockapp2", HTTPAddr: ":8091", Receives: []string{contracts.EventOrderPlaced}}),
			"PostgreSQL role stock_app_app is service stock-app's"},
		{"a duplicate port", with("shipping", func(s *contracts.Service) { s.HTTPAddr = ":8082" }),
			"port 8082 is service stock's"},
		{"one port written two ways", with("shipping", func(s *contracts.Service) { s.HTTPAddr = "0.0.0.0:8082" }),
			"port 8082 is service stock's"},
		{"an HTTP port equal to a relay port", with("shipping", func(s *contracts.Service) { s.HTTPAddr = "[::]:8084" }),
			"port 8084 is service order's"},
		{"the auditor's port", with("shipping", func(s *contracts.Service) { s.HTTPAddr = "127.0.0.1:8085" }),
			"port 8085 is service auditor's"},
		{"a relay port equal to its own HTTP port", with("stock", func(s *contracts.Service) { s.RelayAddr = ":8082" }),
			"port 8082 is service stock's"},
		{"an address without a port", with("shipping", func(s *contracts.Service) { s.HTTPAddr = "8083" }),
			"HTTPAddr"},
		{"a port out of range", with("shipping", func(s *contracts.Service) { s.HTTPAddr = ":70000" }),
			"not a number in 1-65535"},
		{"a named port", with("shipping", func(s *contracts.Service) { s.HTTPAddr = ":http" }),
			"not a number in 1-65535"},
		{"a duplicate database", with("shipping", func(s *contracts.Service) { s.Database = "orders" }),
			"database orders is service order's"},
		{"PostgreSQL's database", with("shipping", func(s *contracts.Service) { s.Database = "postgres" }),
			"database postgres is the deploy files'"},
		{"a duplicate service", with("", none, consumer("stock", "stock2", ":8090")),
			"broker user stock is service stock's"},
		{"a relay address without events", with("shipping", func(s *contracts.Service) { s.RelayAddr = ":8090" }),
			"a RelayAddr without events"},
		{"events without a relay address", with("stock", func(s *contracts.Service) { s.RelayAddr = "" }),
			"a RelayAddr without events"},
		{"a service without an address", with("shipping", func(s *contracts.Service) { s.HTTPAddr = "" }),
			"required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.services, "8085")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestAddrPort: a listen address's port, whatever its host.
func TestAddrPort(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{":8082": "8082", "0.0.0.0:8082": "8082", "[::]:8082": "8082", "localhost:1": "1"} {
		if got, err := addrPort(addr); err != nil || got != want {
			t.Errorf("addrPort(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	for _, addr := range []string{"", "8082", ":0", ":65536", ":08082", ":-1", ":http"} {
		if got, err := addrPort(addr); err == nil {
			t.Errorf("addrPort(%q) = %q, want an error", addr, got)
		}
	}
}

// TestValidateRefusesWhatBreaksTheDeployFiles: registries that break a deploy file, the
// broker or PostgreSQL, each the current registry with one change; each subtest names
// what the registry would break.
func TestValidateRefusesWhatBreaksTheDeployFiles(t *testing.T) {
	consumer := func(name, db, addr string) contracts.Service {
		return contracts.Service{Name: name, Database: db, HTTPAddr: addr, Receives: []string{contracts.EventOrderPlaced}}
	}
	with := func(add ...contracts.Service) []contracts.Service { return append(contracts.Services(), add...) }
	long := strings.Repeat("x", 64) // PostgreSQL keeps 63 bytes of a name
	for _, tc := range []struct {
		name, breaks string
		services     []contracts.Service
	}{
		{"two producers of one event", "ProducerOf names only the first; the second relay's topic permission lets it publish it, rule 8 dead-letters it",
			with(contracts.Service{Name: "dup", Database: "dup", HTTPAddr: ":8090", RelayAddr: ":8091", Publishes: []string{contracts.EventOrderPlaced}})},
		{"a service named like a compose server", "docker-compose.yml gets two services postgres",
			with(consumer("postgres", "pgsvc", ":8090"))},
		{"a service named like a relay's second replica", "docker-compose.yml gets two services order-relay-2",
			with(consumer("order-relay-2", "orderrelay2", ":8090"))},
		{"a service named like a migrate job", "docker-compose.yml gets two services migrate-orders (order's migrate job is migrate-<database>); the Deployment's selector matches the Job's pods",
			with(consumer("migrate-orders", "migrateorders", ":8090"))},
		{"a service named app", "its queue app.events and user app: write on the exchange app.events",
			with(consumer("app", "appdb", ":8090"))},
		{"a service named amq.x", "RabbitMQ refuses queues named amq.*",
			with(consumer("amq.x", "amqx", ":8090"))},
		{"a name with a slash", "rendered paths deploy/k8s/<name>.yaml leave deploy/k8s",
			with(consumer("../../evil", "evil", ":8090"))},
		{"an upper-case name", "Kubernetes names must be lower case; FEED_ variables collide with feed's",
			with(consumer("Order", "order2", ":8090"))},
		{"roles that PostgreSQL truncates to one", "roles and databases of 65 bytes truncate to the same 63 bytes",
			with(consumer(long+"a", long+"a", ":8090"), consumer(long+"b", long+"b", ":8091"))},
		{"a port of the compose servers", "127.0.0.1:5432 is published by postgres in docker-compose.yml",
			with(consumer("billing", "billing", ":5432"))},
		{"a database with a quote", "roles.sql and CREATE DATABASE",
			with(consumer("billing", `bill"ing`, ":8090"))},
		{"an event received that nobody publishes", "the consumer binds a key no relay may publish",
			with(contracts.Service{Name: "billing", Database: "billing", HTTPAddr: ":8090", Receives: []string{"nobody.thing.happened.v1"}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Validate(tc.services, "8085"); err == nil {
				t.Errorf("Validate accepts it; it breaks: %s", tc.breaks)
			}
		})
	}
}
