package main

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"example.com/shop/contracts"
)

// Names the deploy files use for themselves, which no service may take: the broker's
// administrator and the auditor's broker user, the PostgreSQL superuser and the
// auditor's role, PostgreSQL's own databases.
var (
	reservedBrokerUsers = []string{"guest", "auditor"}
	reservedRoles       = []string{"postgres", "auditor"}
	reservedDatabases   = []string{"postgres", "template0", "template1"}
	// reservedProcesses are the compose services and Kubernetes objects that are not a
	// service's: the servers, the auditor and the demo.
	reservedProcesses = []string{"postgres", "rabbitmq", "rabbitmq-2", "rabbitmq-3", "prometheus", "pgbouncer",
		"auditor", "demo", "grafana"}
	// reservedPorts are published by the compose file's servers: PostgreSQL, RabbitMQ,
	// its management UI, Prometheus, Grafana.
	reservedPorts = []string{"5432", "5672", "15672", "9090", "3000"}
)

// nameRE is what a service's name and database may be: a lowercase letter, then up to
// 38 lowercase letters, digits and dashes. It keeps every name derived from it a file
// name inside deploy/, a Kubernetes name, a broker name outside amq.*, and a PostgreSQL
// identifier of at most 63 bytes with _maintenance added.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,38}$`)

// Validate checks the registry before anything is rendered from it, so that no two
// services share a name the deploy files derive from theirs. It returns every problem
// found, joined, each naming the services involved; nil when there is none:
//   - a service without a name, a database or an HTTPAddr;
//   - a broker user given twice: each service's name (its consumer's user), each
//     producer's relay user "<name>-relay" (so a service "stock-relay" beside a
//     producer "stock"), or one of guest and auditor;
//   - a PostgreSQL role given twice (Service.Role of app, relay for a producer and
//     maintenance, so an AppRole equal to another service's role), or postgres,
//     auditor, or a name PostgreSQL keeps for itself (pg_...);
//   - a database given twice, or one of PostgreSQL's own;
//   - an HTTPAddr or RelayAddr that is not host:port with a port in 1-65535, a port
//     given twice, whatever the host (":8082" and "0.0.0.0:8082" are one port), or the
//     auditor's auditorPort;
//   - a RelayAddr without events to publish, or events to publish without one;
//   - a name or database that nameRE refuses, the name app or amq..., or a name whose
//     processes (<name>, <name>-relay, <name>-relay-2, migrate-<database>) are another
//     service's or the deploy files' own (postgres, rabbitmq, auditor, demo, ...);
//   - a port the compose file's servers publish (5432, 5672, 15672, 9090, 3000);
//   - an event published by two services, or received by a service while none
//     publishes it.
func Validate(services []contracts.Service, auditorPort string) error {
	var errs []error
	claim := func(kind string, reserved []string) func(name, owner string) {
		by := map[string]string{}
		for _, r := range reserved {
			by[r] = "the deploy files"
		}
		return func(name, owner string) {
			if other, ok := by[name]; ok {
				errs = append(errs, fmt.Errorf("service %s: the %s %s is %s's already", owner, kind, name, other))
				return
			}
			by[name] = "service " + owner
		}
	}
	user := claim("broker user", reservedBrokerUsers)
	role := claim("PostgreSQL role", reservedRoles)
	database := claim("database", reservedDatabases)
	port := claim("port", reservedPorts)
	port(auditorPort, "auditor")
	process := claim("process name", reservedProcesses)
	publisher := map[string]string{}
	for _, s := range services {
		for _, e := range s.Publishes {
			if other, ok := publisher[e]; ok {
				errs = append(errs, fmt.Errorf("service %s: %s is published by %s already: an event has one producer", s.Name, e, other))
			}
			publisher[e] = s.Name
		}
	}

	for _, s := range services {
		if s.Name == "" || s.Database == "" || s.HTTPAddr == "" {
			errs = append(errs, fmt.Errorf("service %q: Name, Database and HTTPAddr are required", s.Name))
			continue
		}
		producer := len(s.Publishes) > 0
		for _, n := range []struct{ field, name string }{{"Name", s.Name}, {"Database", s.Database}} {
			if !nameRE.MatchString(n.name) || n.name == "app" || strings.HasPrefix(n.name, "amq") {
				errs = append(errs, fmt.Errorf("service %s: %s %q is not a lowercase letter, then at most 38 lowercase letters, digits and dashes, "+
					"or is app or amq... (the broker's)", s.Name, n.field, n.name))
			}
		}
		process(s.Name, s.Name)
		process("migrate-"+s.Database, s.Name)
		if producer {
			process(s.Name+"-relay", s.Name)
			process(s.Name+"-relay-2", s.Name)
		}
		for _, e := range s.Receives {
			if _, ok := publisher[e]; !ok {
				errs = append(errs, fmt.Errorf("service %s: it receives %s, which no service publishes", s.Name, e))
			}
		}
		user(s.Name, s.Name)
		if producer {
			user(s.Name+"-relay", s.Name)
		}
		kinds := []string{"app", "maintenance"}
		if producer {
			kinds = []string{"app", "relay", "maintenance"}
		}
		for _, k := range kinds {
			r := s.Role(k)
			if strings.HasPrefix(r, "pg_") {
				errs = append(errs, fmt.Errorf("service %s: the PostgreSQL role %s starts with pg_, which PostgreSQL keeps for its own", s.Name, r))
			}
			role(r, s.Name)
		}
		database(s.Database, s.Name)
		for _, a := range []struct{ field, addr string }{{"HTTPAddr", s.HTTPAddr}, {"RelayAddr", s.RelayAddr}} {
			if a.addr == "" {
				continue
			}
			p, err := addrPort(a.addr)
			if err != nil {
				errs = append(errs, fmt.Errorf("service %s: %s: %w", s.Name, a.field, err))
				continue
			}
			port(p, s.Name)
		}
		if (s.RelayAddr != "") != producer {
			errs = append(errs, fmt.Errorf("service %s: a RelayAddr without events to publish, or events to publish without one", s.Name))
		}
	}
	return errors.Join(errs...)
}

// addrPort returns the port of a listen address such as ":8082" or "0.0.0.0:8082",
// "8082", or an error when addr is not host:port with a port in 1-65535.
func addrPort(addr string) (string, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q: %w", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
		return "", fmt.Errorf("%q: the port %q is not a number in 1-65535", addr, p)
	}
	return p, nil
}
