package e2e_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"example.com/shop/contracts"
)

// TestComposeFile loads docker-compose.yml with compose-go (the library
// behind `docker compose config`, so the file must be valid compose) and
// keeps its environment in step with the binaries: every variable given to
// a shop process is one that some shop binary reads, each process gets the
// database and broker URLs its subcommand needs (the defaults name
// localhost, wrong inside the compose network), each subcommand exists, and
// HTTP_ADDR listens on the port the service publishes.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root),
		cli.WithProfiles([]string{"*"}), // the on-demand demo too
	)
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	project, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}

	// Each service's binary, the auditor and the demo, with the subcommands each
	// service has by its kinds.
	pkgs := map[string]string{
		"auditor": "example.com/shop/services/auditor/cmd/auditor",
		"demo":    "example.com/shop/e2e/cmd/demo",
	}
	subcommands := map[string][]string{"auditor": {"serve"}}
	for _, svc := range contracts.Services() {
		pkgs[svc.Name] = "example.com/shop/services/" + svc.Name + "/cmd/" + svc.Name
		subs := []string{"serve", "migrate"}
		if len(svc.Receives) > 0 {
			subs = append(subs, "purge-inbox", "dlq")
		}
		if len(svc.Publishes) > 0 {
			subs = append(subs, "relay", "purge-outbox", "replay-outbox")
		}
		subcommands[svc.Name] = subs
	}
	read := map[string]map[string]bool{} // program -> env names its source reads
	shopNames := map[string]bool{}
	for prog, pkg := range pkgs {
		read[prog] = envNamesRead(t, root, pkg, strings.ToUpper(prog)+"_")
		if prog != "demo" {
			for n := range read[prog] {
				shopNames[n] = true
			}
		}
	}
	// The auditor builds one database variable per service of the registry and one
	// metrics variable per consumer, so its source holds no literal to scan for.
	// The demo reads <NAME>_DATABASE_URL of every service of the registry, the same way.
	for _, svc := range contracts.Services() {
		shopNames["AUDITOR_"+strings.ToUpper(svc.Name)+"_DATABASE_URL"] = true
		read["demo"][strings.ToUpper(svc.Name)+"_DATABASE_URL"] = true
	}
	for _, c := range contracts.Consumers() {
		shopNames["AUDITOR_"+strings.ToUpper(c.Name)+"_METRICS_URL"] = true
	}
	for _, svc := range contracts.Services() {
		prog := svc.Name
		for _, must := range []string{strings.ToUpper(prog) + "_DATABASE_URL", "HTTP_ADDR", "LOG_LEVEL"} {
			if !read[prog][must] {
				t.Fatalf("the scan of %s's source found no %s among %v: the scan is broken", prog, must, keys(read[prog]))
			}
		}
	}

	needs := func(prog, sub string) []string {
		if prog == "auditor" {
			vars := []string{"AMQP_URL"}
			for _, svc := range contracts.Services() {
				vars = append(vars, "AUDITOR_"+strings.ToUpper(svc.Name)+"_DATABASE_URL")
			}
			for _, c := range contracts.Consumers() {
				vars = append(vars, "AUDITOR_"+strings.ToUpper(c.Name)+"_METRICS_URL")
			}
			return vars
		}
		db := strings.ToUpper(prog) + "_DATABASE_URL"
		if sub == "relay" || sub == "serve" || sub == "dlq" {
			return []string{db, "AMQP_URL"}
		}
		return []string{db}
	}

	demo := false
	for name, svc := range project.Services {
		image := svc.Image
		if strings.HasPrefix(image, "postgres") || strings.HasPrefix(image, "rabbitmq") ||
			strings.HasPrefix(image, "prom/prometheus") || strings.HasPrefix(image, "grafana/grafana") ||
			strings.HasPrefix(image, "jaegertracing/") {
			continue // a third-party image reads its own variables
		}
		cmd := append(append([]string{}, svc.Entrypoint...), svc.Command...)
		prog, sub := "", ""
		if len(cmd) > 0 {
			prog = path.Base(cmd[0])
		}
		if len(cmd) > 1 {
			sub = cmd[1]
		}
		switch {
		case subcommands[prog] != nil:
			if !slices.Contains(subcommands[prog], sub) {
				t.Errorf("service %s runs %q: %s has no subcommand %q (it has %v)", name, cmd, prog, sub, subcommands[prog])
			}
			for k := range svc.Environment {
				if !shopNames[k] {
					t.Errorf("service %s sets %s, which no shop binary reads", name, k)
				}
			}
			for _, k := range needs(prog, sub) {
				if v := svc.Environment[k]; v == nil || *v == "" {
					t.Errorf("service %s (%s %s) does not set %s; the default names localhost", name, prog, sub, k)
				}
			}
			checkPort(t, name, svc)
		case prog == "demo":
			demo = true
			for k := range svc.Environment {
				if !read["demo"][k] {
					t.Errorf("service %s (the demo) sets %s, which the demo does not read", name, k)
				}
			}
		default:
			t.Errorf("service %s (image %q) runs %q: not a shop binary this test knows", name, image, cmd)
		}
	}
	if !demo {
		t.Error("no service runs the demo")
	}
}

// checkPort checks that a service listening on HTTP_ADDR ":N" publishes N.
func checkPort(t *testing.T, name string, svc types.ServiceConfig) {
	t.Helper()
	addr := svc.Environment["HTTP_ADDR"]
	if addr == nil || len(svc.Ports) == 0 {
		return
	}
	_, port, err := net.SplitHostPort(*addr)
	if err != nil {
		t.Errorf("service %s: HTTP_ADDR %q: %v", name, *addr, err)
		return
	}
	p, _ := strconv.Atoi(port)
	for _, sp := range svc.Ports {
		if int(sp.Target) == p {
			return
		}
	}
	t.Errorf("service %s listens on %s but publishes %v", name, *addr, svc.Ports)
}

var envName = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)

// envNamesRead returns the environment variable names that the non-test Go
// files of pkg and of every package of this repository it depends on read:
// string literals of that shape passed as an argument of a call
// (env.String("X", ...), getenv("X"), pg.URLFromEnv(env, "X", ...)) or given
// to a constant. A name built
// as prefix + "SUFFIX" (the services' own variables, such as STOCK_WORKERS)
// counts as the program's prefix followed by SUFFIX.
func envNamesRead(t *testing.T, root, pkg, prefix string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.Dir}}", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	names := map[string]bool{}
	lit := func(e ast.Expr) {
		name := prefix
		if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
			e = b.Y
		} else {
			name = ""
		}
		if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
			if s, err := strconv.Unquote(bl.Value); err == nil && envName.MatchString(name+s) && strings.Contains(name+s, "_") {
				names[name+s] = true
			}
		}
	}
	fset := token.NewFileSet()
	for _, dir := range strings.Fields(string(out)) {
		if !strings.HasPrefix(dir, root+string(filepath.Separator)) {
			continue // the standard library and third-party modules
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range files {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				t.Fatalf("parse %s: %v", p, err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					for _, a := range n.Args {
						lit(a)
					}
				case *ast.ValueSpec:
					for _, v := range n.Values {
						lit(v)
					}
				}
				return true
			})
		}
	}
	return names
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestImageStampsVersion: the image is built as `make build` builds bin/, so that
// `<binary> --version` in a container names the release: deploy/Dockerfile takes
// VERSION as a build argument into the Makefile's -X flag, docker-compose.yml passes
// it to every shop image it builds, `make up` sets it, and the Dockerfile copies
// the go.mod of every module go.work names (the workspace loads none without all).
func TestImageStampsVersion(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	makefile, dockerfile := read("Makefile"), read("deploy/Dockerfile")

	m := regexp.MustCompile(`(?m)^LDFLAGS\s*:=.*-X\s+(\S+)=\$\(VERSION\)`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatal("Makefile: no LDFLAGS line with -X <name>=$(VERSION): the check reads nothing")
	}
	if !regexp.MustCompile(`(?m)^ARG VERSION\b`).MatchString(dockerfile) {
		t.Error("deploy/Dockerfile declares no ARG VERSION")
	}
	build := regexp.MustCompile(`(?s)RUN[^\n]*(?:\\\n[^\n]*)*go build[^\n]*`).FindString(dockerfile)
	if want := "-X " + m[1] + "=${VERSION}"; !strings.Contains(build, want) {
		t.Errorf("deploy/Dockerfile builds with %q, want the Makefile's %s", build, want)
	}
	if !regexp.MustCompile(`(?m)^up:\n\tVERSION=\$\(VERSION\) docker compose`).MatchString(makefile) {
		t.Error("Makefile: `make up` does not pass VERSION to docker compose")
	}
	for _, mod := range regexp.MustCompile(`(?m)^\s+\./(\S+)$`).FindAllStringSubmatch(read("go.work"), -1) {
		if !strings.Contains(dockerfile, "COPY "+mod[1]+"/go.* "+mod[1]+"/") {
			t.Errorf("deploy/Dockerfile does not copy %s/go.* before go mod download", mod[1])
		}
	}

	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithProfiles([]string{"*"}),
		cli.WithEnv([]string{"VERSION=v9.9.9-test"}))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	built := 0
	for name, svc := range project.Services {
		if svc.Build == nil || !strings.HasSuffix(svc.Build.Dockerfile, "deploy/Dockerfile") {
			continue
		}
		built++
		if v := svc.Build.Args["VERSION"]; v == nil || *v != "v9.9.9-test" {
			t.Errorf("service %s builds the image without VERSION from the environment (args %v)", name, svc.Build.Args)
		}
	}
	if built == 0 {
		t.Fatal("no service builds deploy/Dockerfile: the check checked nothing")
	}
}

// TestComposeHA loads docker-compose.yml with docker-compose.ha.yml over it (`make
// up-ha`) and checks the cluster shape: three RabbitMQ nodes on the image and
// configuration of the one-node file, each under a host name the others resolve,
// with its own data and the same Erlang cookie; deploy/rabbitmq/cluster.conf lists
// exactly those nodes; and every process that has a broker URL in docker-compose.yml
// names the three nodes, as the same user and vhost (the demo aside: it talks to one
// node's management API).
func TestComposeHA(t *testing.T) {
	t.Parallel()
	single := loadCompose(t, "docker-compose.yml")
	ha := loadCompose(t, "docker-compose.yml", "docker-compose.ha.yml")

	var hosts, nodes []string
	cookies, data := map[string]bool{}, map[string]bool{}
	for name, svc := range ha.Services {
		if !strings.HasPrefix(svc.Image, "rabbitmq") {
			continue
		}
		hosts = append(hosts, svc.Hostname+":5672")
		nodes = append(nodes, "rabbit@"+svc.Hostname)
		if svc.Image != single.Services["rabbitmq"].Image {
			t.Errorf("node %s runs %s, not the one-node file's %s", name, svc.Image, single.Services["rabbitmq"].Image)
		}
		if name != svc.Hostname && (svc.Networks["default"] == nil || !slices.Contains(svc.Networks["default"].Aliases, svc.Hostname)) {
			t.Errorf("node %s: the other nodes cannot resolve its host name %q", name, svc.Hostname)
		}
		if c := svc.Environment["RABBITMQ_ERLANG_COOKIE"]; c != nil && *c != "" {
			cookies[*c] = true
		}
		mounts := map[string]string{}
		for _, v := range svc.Volumes {
			mounts[v.Target] = v.Source
		}
		data[mounts["/var/lib/rabbitmq"]] = true
		for target, file := range map[string]string{
			"/etc/rabbitmq/conf.d/20-shop.conf":    "deploy/rabbitmq/rabbitmq.conf",
			"/etc/rabbitmq/definitions.json":       "deploy/rabbitmq/definitions.json",
			"/etc/rabbitmq/conf.d/30-cluster.conf": "deploy/rabbitmq/cluster.conf",
		} {
			if !strings.HasSuffix(mounts[target], file) {
				t.Errorf("node %s mounts %q on %s, want %s", name, mounts[target], target, file)
			}
		}
	}
	slices.Sort(hosts)
	slices.Sort(nodes)
	if len(hosts) != 3 || len(data) != 3 || len(cookies) != 1 {
		t.Fatalf("nodes %v with %d data volumes and %d Erlang cookies; want 3 nodes, 3 volumes, 1 cookie", hosts, len(data), len(cookies))
	}

	conf, err := os.ReadFile("../deploy/rabbitmq/cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	backend := ""
	for _, line := range strings.Split(string(conf), "\n") {
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || strings.HasPrefix(k, "#"):
		case k == "cluster_formation.peer_discovery_backend":
			backend = v
		case strings.HasPrefix(k, "cluster_formation.classic_config.nodes."):
			listed = append(listed, v)
		}
	}
	slices.Sort(listed)
	if backend != "classic_config" || !slices.Equal(listed, nodes) {
		t.Errorf("cluster.conf: backend %q, nodes %v; want classic_config and %v", backend, listed, nodes)
	}

	checked := 0
	for name, svc := range single.Services {
		one := svc.Environment["AMQP_URL"]
		if one == nil || name == "demo" {
			continue
		}
		checked++
		base, err := url.Parse(*one)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, raw := range strings.Split(*ha.Services[name].Environment["AMQP_URL"], ",") {
			u, err := url.Parse(raw)
			if err != nil {
				t.Errorf("service %s: AMQP_URL: %v", name, err)
				continue
			}
			if u.User.String() != base.User.String() || u.Path != base.Path {
				t.Errorf("service %s: AMQP_URL %s is not as %s and vhost %q", name, raw, base.User.Username(), base.Path)
			}
			got = append(got, u.Host)
		}
		slices.Sort(got)
		if !slices.Equal(got, hosts) {
			t.Errorf("service %s: AMQP_URL names %v, want the nodes %v", name, got, hosts)
		}
	}
	if checked < len(contracts.Services()) {
		t.Fatalf("only %d services have a broker URL: the check checked little", checked)
	}
}

// loadCompose loads the compose files (relative to the repository) with every
// profile, as `docker compose -f ... config` would.
func loadCompose(t *testing.T, files ...string) *types.Project {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		files[i] = filepath.Join(root, f)
	}
	opts, err := cli.NewProjectOptions(files, cli.WithWorkingDirectory(root), cli.WithProfiles([]string{"*"}))
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	project, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("%v do not load: %v", files, err)
	}
	return project
}
