package main

import (
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
)

// TestDemoFollowsTheRegistry: the demo runs every service of the registry
// (contracts.Services), a service added by `make service` included, without
// starting it: a database demo_<database> each, on the server of the service's
// <NAME>_DATABASE_URL; a serve per service and a relay per producer, each under a
// role of deploy/postgres/roles.sql of its own and, in a fresh vhost, as the
// broker user of deploy/rabbitmq/definitions.json of its name, the consumers
// accepting each producer's events from its relay only; and the auditor reading
// every service's database.
func TestDemoFollowsTheRegistry(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, b := range append(serviceNames(), "auditor") {
		if err := os.WriteFile(filepath.Join(bin, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"STOCK_DATABASE_URL": "postgres://postgres@elsewhere:5433/stock?sslmode=disable"}
	s, err := parse([]string{"-bin", bin}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dbURLs, err := demoDatabases(s.dbServers)
	if err != nil {
		t.Fatal(err)
	}
	roles, err := readRoles(filepath.Join(root, rolesSQL))
	if err != nil {
		t.Fatal(err)
	}
	users, err := system.BrokerUsers(filepath.Join(root, definitionsJSON))
	if err != nil {
		t.Fatal(err)
	}
	userURLs := map[string]string{}
	for _, u := range users {
		userURLs[u.Name] = "amqp://" + u.Name + ":" + u.Password + "@localhost:5672/shop-demo"
	}
	procEnv, err := processEnv(dbURLs, userURLs, roles)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := system.New(system.Config{BinDir: bin, DBURLs: dbURLs, AMQPURL: "amqp://guest:guest@localhost:5672/shop-demo",
		Auditor: true, AuditorDBURLs: dbURLs, ProcessEnv: procEnv})
	if err != nil {
		t.Fatal(err)
	}

	// value returns the last value of key in a process's variables (the one it sees).
	value := func(p *system.Process, key string) string {
		v := ""
		for _, kv := range p.Env {
			if k, val, _ := strings.Cut(kv, "="); k == key {
				v = val
			}
		}
		return v
	}
	user := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			return ""
		}
		return u.User.Username()
	}
	seenRoles := map[string]string{}
	runs := func(name, service string) *system.Process {
		t.Helper()
		p := sys.Process(name)
		if p == nil {
			t.Fatalf("the demo runs no process %s", name)
		}
		u, err := url.Parse(value(p, dbVar(service)))
		if err != nil {
			t.Fatalf("%s: %s: %v", name, dbVar(service), err)
		}
		svc, _ := contracts.ServiceNamed(service)
		if u.Path != "/demo_"+svc.Database {
			t.Errorf("%s runs on database %s, want demo_%s", name, u.Path, svc.Database)
		}
		role := u.User.Username()
		if !roles[role] || role == "postgres" {
			t.Errorf("%s runs as %q, not a role of %s", name, role, rolesSQL)
		}
		if other, ok := seenRoles[role]; ok {
			t.Errorf("%s and %s both run as %s", other, name, role)
		}
		seenRoles[role] = name
		return p
	}
	for _, svc := range contracts.Services() {
		runs(svc.Name, svc.Name)
		if got, want := hostOf(dbURLs[svc.Name]), hostOf(s.dbServers[svc.Name]); got != want {
			t.Errorf("demo database of %s on %s, want the server of %s, %s", svc.Name, got, dbVar(svc.Name), want)
		}
	}
	if got := hostOf(dbURLs[contracts.ConsumerStock]); got != "elsewhere:5433" {
		t.Errorf("stock's demo database on %s, want the server of STOCK_DATABASE_URL", got)
	}
	for _, p := range contracts.Producers() {
		relay := runs(system.RelayName(p.Name), p.Name)
		if got := user(value(relay, "AMQP_URL")); got != p.RelayUser {
			t.Errorf("%s publishes as broker user %q, want %q", relay.Name, got, p.RelayUser)
		}
	}
	for _, c := range contracts.Consumers() {
		p := sys.Process(c.Name)
		if got := user(value(p, "AMQP_URL")); got != c.Name {
			t.Errorf("%s consumes as broker user %q, want %q", c.Name, got, c.Name)
		}
		if got := value(p, "RELAY_USERS"); got != contracts.RelayUsers() {
			t.Errorf("%s: RELAY_USERS=%q, want %q", c.Name, got, contracts.RelayUsers())
		}
	}
	if got := user(value(sys.Auditor, "AMQP_URL")); got != "auditor" {
		t.Errorf("the auditor counts dead letters as broker user %q, want auditor", got)
	}
	for _, svc := range contracts.Services() {
		if got := value(sys.Auditor, "AUDITOR_"+dbVar(svc.Name)); got != dbURLs[svc.Name] {
			t.Errorf("the auditor reads %s at %q, want %q", svc.Name, got, dbURLs[svc.Name])
		}
	}
	if want := len(contracts.Services()) + len(contracts.Producers()) + 1; len(sys.All()) != want {
		t.Errorf("the demo runs %d processes, want %d: a serve per service, a relay per producer, the auditor", len(sys.All()), want)
	}
	said := runsAs(sys.All(), procEnv)
	for _, name := range append(serviceNames(), "auditor") {
		if !strings.Contains(said, name+" as ") {
			t.Errorf("runsAs = %q, without %s", said, name)
		}
	}
}
