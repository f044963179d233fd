package e2e_test

import (
	"encoding/json"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	promlabels "github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/platform/amqp"
)

// The registry in contracts (Services, Producers, Consumers) is the one list of the
// shop's services. These tests fail when a file that has to name each service lacks
// one: the recipe in docs/architecture.md ("Add a service") follows their messages.

// registryCommands is what has to run for the registry, as "<binary> <subcommand>":
// each service's serve and migrate, each producer's relay and purge-outbox, each
// consumer's purge-inbox and dlq.
type registryCommands struct {
	serve, migrate, relay, purgeOutbox, purgeInbox, dlq []string
}

func commandsOfRegistry() registryCommands {
	var rc registryCommands
	for _, s := range contracts.Services() {
		rc.serve = append(rc.serve, s.Name+" serve")
		rc.migrate = append(rc.migrate, s.Name+" migrate")
	}
	for _, p := range contracts.Producers() {
		rc.relay = append(rc.relay, p.Name+" relay")
		rc.purgeOutbox = append(rc.purgeOutbox, p.Name+" purge-outbox")
	}
	for _, c := range contracts.Consumers() {
		rc.purgeInbox = append(rc.purgeInbox, c.Name+" purge-inbox")
		rc.dlq = append(rc.dlq, c.Name+" dlq")
	}
	return rc
}

// command returns "<binary> <subcommand>" of a container's command line
// ("/usr/local/bin/stock", "serve", ...), or "" for none.
func command(cmd []string) string {
	if len(cmd) < 2 {
		return ""
	}
	return path.Base(cmd[0]) + " " + cmd[1]
}

// TestBuildFollowsTheRegistry: every service of the registry is a module of go.work
// with its binary in services/<name>/cmd/<name>, which make build and the end-to-end
// suite build; and no binary there is missing from the registry (the auditor aside).
func TestBuildFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	work, err := os.ReadFile("../go.work")
	if err != nil {
		t.Fatal(err)
	}
	modules := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*\./(\S+)\s*$`).FindAllStringSubmatch(string(work), -1) {
		modules[m[1]] = true
	}
	want := []string{"auditor"}
	for _, s := range contracts.Services() {
		want = append(want, s.Name)
	}
	slices.Sort(want)
	for _, name := range want {
		if !modules["services/"+name] {
			t.Errorf("go.work does not use ./services/%s", name)
		}
	}
	cmds, err := filepath.Glob("../services/*/cmd/*")
	if err != nil {
		t.Fatal(err)
	}
	var bins []string
	for _, c := range cmds {
		if filepath.Base(c) != filepath.Base(filepath.Dir(filepath.Dir(c))) {
			t.Errorf("%s: a service's binary is services/<name>/cmd/<name>", c)
		}
		bins = append(bins, filepath.Base(c))
	}
	if !slices.Equal(bins, want) {
		t.Errorf("binaries services/*/cmd/* %v, want the registry's services and the auditor %v", bins, want)
	}
	if got := slices.Sorted(maps.Keys(system.Binaries())); !slices.Equal(got, want) {
		t.Errorf("the suite builds %v, want %v", got, want)
	}
	// The Makefile derives its lists from go.work and services/*/cmd/*: naming a
	// service there would be one more place to edit.
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if strings.Contains(string(mk), "services/"+name) {
			t.Errorf("the Makefile names services/%s: derive the list instead", name)
		}
	}
}

// TestComposeFollowsTheRegistry: `docker compose up`, with no profile, starts for each
// service of the registry its migrate and serve, for each producer two relays (one leads,
// one stands by), and the auditor; `--profile tools` adds each consumer's dlq; and
// Prometheus (deploy/prometheus/prometheus.yml) scrapes every serve and relay it starts.
func TestComposeFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]string{} // "<binary> <subcommand>" -> compose services
	for _, profiles := range [][]string{nil, {"tools"}} {
		opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
			cli.WithWorkingDirectory(root), cli.WithProfiles(profiles))
		if err != nil {
			t.Fatal(err)
		}
		project, err := opts.LoadProject(t.Context())
		if err != nil {
			t.Fatalf("docker-compose.yml does not load: %v", err)
		}
		for name, svc := range project.Services {
			if profiles == nil || len(svc.Profiles) > 0 {
				c := command(append(slices.Clone(svc.Entrypoint), svc.Command...))
				runs[c] = append(runs[c], name)
			}
		}
	}
	rc := commandsOfRegistry()
	for _, want := range slices.Concat(rc.migrate, rc.serve, rc.relay, rc.dlq, []string{"auditor serve"}) {
		n := 1
		if slices.Contains(rc.relay, want) {
			n = 2
		}
		if len(runs[want]) != n {
			t.Errorf("docker-compose.yml: services %v run %q, want %d", runs[want], want, n)
		}
	}

	raw, err := os.ReadFile("../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &prom); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	scraped := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, _, _ := strings.Cut(target, ":")
				scraped[host] = true
			}
		}
	}
	for _, want := range slices.Concat(rc.serve, rc.relay, []string{"auditor serve"}) {
		for _, svc := range runs[want] {
			if !scraped[svc] {
				t.Errorf("deploy/prometheus/prometheus.yml does not scrape %s (%s)", svc, want)
			}
		}
	}
}

// TestKubernetesFollowsTheRegistry: deploy/k8s runs, for each service of the
// registry, a Deployment of its serve and a Job of its migrate; for each producer a
// Deployment of its relay and a CronJob of its purge-outbox; for each consumer a
// CronJob of its purge-inbox. Each process reads its database URL from
// <NAME>_DATABASE_URL and connects as the registry's role for it (Service.Role:
// app for serve, relay, maintenance for the purges) and as the broker user the
// registry names (the service's own for serve, its relay user for relay); every
// consumer accepts each producer's events from that producer's relay user alone
// (RELAY_USERS).
func TestKubernetesFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	m := render(t)
	runs := map[string][]string{} // "<binary> <subcommand>" -> owners of the pods that run it
	for _, p := range m.pods() {
		for _, c := range p.spec.Containers {
			cmd := command(c.Command)
			runs[cmd] = append(runs[cmd], p.owner)
			s, ok := contracts.ServiceNamed(strings.Fields(cmd + " ")[0])
			if !ok {
				t.Errorf("%s runs %q, a command of no service of the registry", p.owner, cmd)
				continue
			}
			var role, user string // the URLs' users; "" for the owner's URL, which is the deployer's
			switch sub := strings.TrimPrefix(cmd, s.Name+" "); sub {
			case "serve":
				role = s.Role("app")
				if len(s.Receives) > 0 {
					user = s.Name // a serve that only produces needs no broker
				} else if _, ok := m.urls(c)["AMQP_URL"]; ok {
					t.Errorf("%s: AMQP_URL, but %s serve consumes nothing and needs no broker", p.owner, s.Name)
				}
				if v := m.config(c)["RELAY_USERS"]; len(s.Receives) > 0 && v != contracts.RelayUsers() {
					t.Errorf("%s: RELAY_USERS = %q, want %q", p.owner, v, contracts.RelayUsers())
				}
			case "relay":
				role = s.Role("relay")
				for _, prod := range contracts.Producers() {
					if prod.Name == s.Name {
						user = prod.RelayUser
					}
				}
			case "purge-outbox", "purge-inbox":
				role = s.Role("maintenance")
			}
			urls := m.urls(c)
			prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
			db, ok := urls[prefix+"_DATABASE_URL"]
			if !ok {
				t.Errorf("%s: no %s_DATABASE_URL from the Secret", p.owner, prefix)
			}
			for env, want := range map[string]string{prefix + "_DATABASE_URL": role, "AMQP_URL": user} {
				u, err := url.Parse(urls[env])
				if want != "" && (err != nil || u.User.Username() != want) {
					t.Errorf("%s: %s = %q, want the user %s", p.owner, env, urls[env], want)
				}
			}
			if u, err := url.Parse(db); err != nil || strings.TrimPrefix(u.Path, "/") != s.Database {
				t.Errorf("%s: %s_DATABASE_URL = %q, want the database %s", p.owner, prefix, db, s.Database)
			}
		}
	}
	rc := commandsOfRegistry()
	for _, w := range []struct {
		kind string
		cmds []string
	}{
		{"Deployment", rc.serve}, {"Deployment", rc.relay}, {"Job", rc.migrate},
		{"CronJob", rc.purgeOutbox}, {"CronJob", rc.purgeInbox},
	} {
		for _, cmd := range w.cmds {
			if !slices.ContainsFunc(runs[cmd], func(owner string) bool { return strings.HasPrefix(owner, w.kind+" ") }) {
				t.Errorf("deploy/k8s: no %s runs %q", w.kind, cmd)
			}
		}
	}
}

// TestAccessFollowsTheRegistry: the users of deploy/rabbitmq/definitions.json (one per
// relay and per consumer, and the auditor: system.BrokerUsers) may use exactly the names
// they need, whatever the service: a consumer configures and reads its queue and
// dead-letter queue and writes its own copies exchange only, a relay writes to the
// exchange its own producer's events only, touches no queue and may not read the
// alternate exchange, the auditor may write the dead-letter queues it counts (what
// RabbitMQ 4.2.7 and later ask of a passive declare) and nothing else, and no user but
// guest may publish through the default exchange. TestBrokerUsersAreLimited shows the
// broker enforcing it.
func TestAccessFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	users, err := system.BrokerUsers(definitionsJSON)
	if err != nil {
		t.Fatal(err)
	}
	perms := map[string][3]*regexp.Regexp{} // user -> configure, write, read
	topic := map[string]*regexp.Regexp{}    // user -> routing keys it may publish to the exchange
	for _, u := range users {
		var rs [3]*regexp.Regexp
		for i, expr := range []string{u.Configure, u.Write, u.Read} {
			if rs[i], err = regexp.Compile(expr); err != nil {
				t.Fatalf("definitions.json: user %s: %v", u.Name, err)
			}
		}
		perms[u.Name] = rs
		for _, tp := range u.Topic {
			if tp.Exchange == contracts.Exchange {
				if topic[u.Name], err = regexp.Compile(tp.Write); err != nil {
					t.Fatalf("definitions.json: topic permission of %s: %v", u.Name, err)
				}
			}
		}
	}
	var names []string // every queue and exchange of the registry
	for _, c := range contracts.Consumers() {
		names = append(names, c.Queue, c.DeadLetterQueue, amqp.CopiesExchange(c.Queue))
	}
	names = append(names, contracts.Exchange, "amq.default")
	for _, c := range contracts.Consumers() {
		p := perms[c.Name]
		for _, q := range []string{c.Queue, c.DeadLetterQueue} {
			if !p[0].MatchString(q) || !p[2].MatchString(q) {
				t.Errorf("definitions.json: user %s may not configure and read %s", c.Name, q)
			}
		}
		if !p[1].MatchString(c.DeadLetterQueue) {
			t.Errorf("definitions.json: user %s may not write to %s", c.Name, c.DeadLetterQueue)
		}
		for _, other := range contracts.Consumers() {
			if x := amqp.CopiesExchange(other.Queue); p[1].MatchString(x) != (other.Name == c.Name) {
				t.Errorf("definitions.json: user %s may write to %s: %v, want %v", c.Name, x, !(other.Name == c.Name), other.Name == c.Name)
			}
		}
		if p[1].MatchString(contracts.Exchange) {
			t.Errorf("definitions.json: user %s may publish to %s", c.Name, contracts.Exchange)
		}
	}
	for name, p := range perms {
		if p[1].MatchString("amq.default") {
			t.Errorf("definitions.json: user %s may publish through the default exchange (amq.default), into any queue", name)
		}
	}
	for _, prod := range contracts.Producers() {
		user := system.RelayName(prod.Name)
		if user != prod.RelayUser {
			t.Errorf("registry: producer %s has RelayUser %q; its relay runs as %s", prod.Name, prod.RelayUser, user)
		}
		p := perms[user]
		if !p[1].MatchString(contracts.Exchange) {
			t.Errorf("definitions.json: user %s may not write to %s", user, contracts.Exchange)
		}
		for _, c := range contracts.Consumers() {
			if p[0].MatchString(c.Queue) || p[2].MatchString(c.Queue) {
				t.Errorf("definitions.json: user %s may configure or read %s", user, c.Queue)
			}
		}
		keys := topic[user]
		if keys == nil {
			t.Errorf("definitions.json: user %s has no topic permission on %s, so it may publish any event", user, contracts.Exchange)
			continue
		}
		for _, other := range contracts.Producers() {
			for _, ev := range other.Events {
				if mine := other.Name == prod.Name; keys.MatchString(ev) != mine {
					t.Errorf("definitions.json: topic permission of %s: publishing %s allowed = %v, want %v", user, ev, !mine, mine)
				}
			}
		}
	}
	// The auditor counts the dead-letter queues with a passive declare, which RabbitMQ
	// 4.2.7 and later allow with any permission on the queue (4.2.6 and 4.3.0 only with
	// configure, earlier releases with none): it may write them, and nothing else.
	counted := map[string]bool{}
	for _, c := range contracts.Consumers() {
		counted[c.DeadLetterQueue] = true
	}
	for i, p := range perms["auditor"] {
		for _, x := range append(names, contracts.AlternateExchange, contracts.UnroutableQueue, contracts.DeadLetterExchange) {
			if allowed := i == 1 && counted[x]; p.MatchString(x) != allowed {
				t.Errorf("definitions.json: user auditor may %s %s: %v, want %v", [3]string{"configure", "write", "read"}[i], x, !allowed, allowed)
			}
		}
	}
	// A relay that may read the alternate exchange could bind app.events to it and
	// route what it publishes there past its topic permission.
	for _, prod := range contracts.Producers() {
		if perms[prod.RelayUser][2].MatchString(contracts.AlternateExchange) {
			t.Errorf("definitions.json: user %s may read %s", prod.RelayUser, contracts.AlternateExchange)
		}
	}
}

// TestMonitoringFollowsTheRegistry: the alert rules (deploy/prometheus/alerts.yaml)
// cover every service of the registry because none of their expressions picks one
// service by name, every expression over a consumer's metrics keeps the consumer
// label, and the dead-letter alert's queue pattern matches every dead-letter queue.
// The dashboard (deploy/grafana/shop.json) has a row for each producer's relay and
// each consumer, and every selector of a relay's or a consumer's metric in a panel
// picks the service of the panel's row: no panel sums two services or shows another's
// series.
func TestMonitoringFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	perConsumer := regexp.MustCompile(`^(inbox_|amqp_consumer_|dead_letters_open|delivery_(unaccounted|dead_letter))`)

	names := map[string]bool{}
	for _, s := range contracts.Services() {
		names[s.Name] = true
	}
	for _, p := range contracts.Producers() {
		names[p.RelayUser] = true
	}
	for _, c := range contracts.Consumers() {
		names[c.Queue], names[c.DeadLetterQueue] = true, true
	}
	matcher := regexp.MustCompile(`\b(consumer|producer|queue|job|service)\s*=\s*"([^"]*)"`)
	byConsumer := regexp.MustCompile(`by\s*\([^)]*\bconsumer\b`)
	var dlqPatterns []*regexp.Regexp
	alerts := alertExprs(t)
	if len(alerts) < 10 {
		t.Fatalf("read only %d alerts from alerts.yaml: the parse is broken", len(alerts))
	}
	for _, e := range alerts {
		for _, m := range matcher.FindAllStringSubmatch(e.expr, -1) {
			if names[m[2]] {
				t.Errorf("%s watches %s=%q only: %s", e.where, m[1], m[2], e.expr)
			}
		}
		if slices.ContainsFunc(metricNames(t, e.expr), perConsumer.MatchString) && !byConsumer.MatchString(e.expr) {
			t.Errorf("%s sums its consumers' metrics into one series: group by consumer: %s", e.where, e.expr)
		}
		for _, m := range regexp.MustCompile(`queue\s*=~\s*"([^"]*)"`).FindAllStringSubmatch(e.expr, -1) {
			re, err := regexp.Compile("^(?:" + strings.ReplaceAll(m[1], `\\`, `\`) + ")$")
			if err != nil {
				t.Errorf("%s: queue pattern %q: %v", e.where, m[1], err)
				continue
			}
			dlqPatterns = append(dlqPatterns, re)
		}
	}
	for _, c := range contracts.Consumers() {
		if !slices.ContainsFunc(dlqPatterns, func(re *regexp.Regexp) bool { return re.MatchString(c.DeadLetterQueue) }) {
			t.Errorf("no alert watches the dead-letter queue %s by its queue pattern", c.DeadLetterQueue)
		}
	}

	// What each selector must pick, by the label that names it (a relay's job, a
	// consumer, a consumer's dead-letter queue), and the row that shows it: the
	// service's, naming the relay's job or the consumer's queue.
	type pick struct{ what, service, rowNames string }
	picks := map[string]pick{}
	for _, p := range contracts.Producers() {
		picks["job="+p.RelayUser] = pick{p.Name + "'s relay", p.Name, p.RelayUser}
	}
	for _, c := range contracts.Consumers() {
		picks["consumer="+c.Name] = pick{"consumer " + c.Name, c.Name, c.Queue}
		picks["queue="+c.DeadLetterQueue] = pick{"consumer " + c.Name, c.Name, c.Queue}
	}
	raw, err := os.ReadFile("../deploy/grafana/shop.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("shop.json: %v", err)
	}
	shown := map[string]bool{}
	row := ""
	for _, p := range dash.Panels {
		if p.Type == "row" {
			row = p.Title
			continue
		}
		for _, tg := range p.Targets {
			e, err := parser.ParseExpr(tg.Expr)
			if err != nil {
				t.Fatalf("shop.json: panel %s: %q: %v", p.Title, tg.Expr, err)
			}
			parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				label := ""
				switch {
				case strings.HasPrefix(vs.Name, "relay_"):
					label = "job"
				case perConsumer.MatchString(vs.Name):
					label = "consumer"
				case vs.Name == "amqp_queue_messages":
					label = "queue"
				default:
					return nil
				}
				value := ""
				for _, m := range vs.LabelMatchers {
					if m.Name == label && m.Type == promlabels.MatchEqual {
						value = m.Value
					}
				}
				want, ok := picks[label+"="+value]
				switch {
				case label == "queue" && value == contracts.UnroutableQueue:
				case !ok:
					t.Errorf("shop.json: panel %s (row %q): %s picks no %s of the registry", p.Title, row, vs, label)
				case !strings.HasPrefix(row, want.service+": ") || !strings.Contains(row, want.rowNames):
					t.Errorf("shop.json: panel %s (row %q) shows %s: %s", p.Title, row, want.what, vs)
				default:
					shown[want.what] = true
				}
				return nil
			})
		}
	}
	for _, want := range picks {
		if !shown[want.what] {
			t.Errorf("shop.json: no row shows %s", want.what)
		}
	}
}
