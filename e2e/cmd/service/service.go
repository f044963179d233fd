package main

import (
	"bytes"
	"embed"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/project"
)

//go:embed template
var templates embed.FS

// Options is one service to add: its name and kind, and the repository.
type Options struct {
	Name, Kind, Root string
}

// Result is what Add did: the files it wrote and those `make generate` wrote after it,
// each a slash-separated path under the repository, and the new service's HTTP address.
type Result struct {
	Wrote, Generated []string
	HTTPAddr         string
}

// data is what the templates see.
type data struct {
	Module    string // the workspace's module path prefix, example.com/shop
	GoVersion string // the go directive of go.work
	Name      string // billing
	Title     string // Billing
	Upper     string // BILLING, the prefix of its variables
	Queue     string // billing.events
	Port      string // 8088, of its serve
	Pad       string // as many spaces as Name has letters, to align text under it
	// Receives are the events it receives, in the order of its registry entry.
	Receives []receive
	// Consumer: it receives events (KIND=consumer or both); Producer: it publishes one
	// (KIND=producer or both).
	Consumer, Producer bool
	// A producer's only:
	Event      string // ledger.ledger.recorded.v1, its one event
	EventConst string // EventLedgerRecorded, the event's constant in contracts
	RelayPort  string // 8090, of its relay
}

// receive is one event the service receives, as its handler names it.
type receive struct {
	Name    string // order.order.placed.v1
	Const   string // contracts.EventOrderPlaced
	Payload string // the payload type the inbox decodes it into: contracts.OrderPlaced
	Own     bool   // the service's own event
}

// RawPayload reports whether a handler takes its payload undecoded (json.RawMessage): an
// event whose payload has no Go type in contracts.
func (d data) RawPayload() bool {
	return slices.ContainsFunc(d.Receives, func(r receive) bool { return r.Payload == rawPayload })
}

const rawPayload = "json.RawMessage"

// auditorPort is the port of the auditor's serve (services/auditor), which is not in the
// registry.
const auditorPort = 8085

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// Add adds the service o names. It refuses, before writing anything, a bad name or kind, a
// name that the registry, services/ or docker-compose.yml has already, and a name the
// service's Go code cannot take as its package's. Then it writes services/NAME (and the
// event's schema for a producer), adds the registry entry and the module to go.work, tidies
// the module and runs `make generate`.
func Add(o Options) (Result, error) {
	d, err := plan(o)
	if err != nil {
		return Result{}, err
	}
	files, err := render(d)
	if err != nil {
		return Result{}, err
	}
	if err := refuseImportedName(d.Name, files); err != nil {
		return Result{}, err
	}
	if err := refuseTemplateIdent(d); err != nil {
		return Result{}, err
	}
	registry, err := os.ReadFile(filepath.Join(o.Root, "contracts", "registry.go"))
	if err != nil {
		return Result{}, err
	}
	// The entry is checked against the registry file before anything is written.
	if _, err := addEntry(registry, entry(d)); err != nil {
		return Result{}, fmt.Errorf("contracts/registry.go: %w", err)
	}

	w := writer{root: o.Root}
	generated := readGoGenerated(o.Root)
	for _, rel := range slices.Sorted(keys(files)) {
		if err := w.write(rel, files[rel]); err != nil {
			return w.result(d), err
		}
	}
	sum, err := goSum(o.Root)
	if err != nil {
		return w.result(d), err
	}
	if err := w.write("services/"+d.Name+"/go.sum", sum); err != nil {
		return w.result(d), err
	}
	if d.Producer {
		// The event's constant, which the registry entry names, comes from its schema.
		if _, err := goCommand(filepath.Join(o.Root, "contracts"), "generate", "./..."); err != nil {
			return w.result(d), err
		}
		if err := checkEventConst(o.Root, d.EventConst, d.Event); err != nil {
			return w.result(d), err
		}
	}
	if registry, err = addEntry(registry, entry(d)); err != nil {
		return w.result(d), fmt.Errorf("contracts/registry.go: %w", err)
	}
	if err := w.write("contracts/registry.go", registry); err != nil {
		return w.result(d), err
	}
	if _, err := goCommand(o.Root, "work", "use", "./services/"+d.Name); err != nil {
		return w.result(d), err
	}
	w.wrote = append(w.wrote, "go.work")
	if _, err := goCommand(filepath.Join(o.Root, "services", d.Name), "mod", "tidy"); err != nil {
		return w.result(d), err
	}
	r := w.result(d)
	r.Generated, err = generate(o.Root, generated)
	return r, err
}

// plan checks o and returns what the templates see.
func plan(o Options) (data, error) {
	if !nameRE.MatchString(o.Name) {
		return data{}, usagef("NAME %q: a service name is a lowercase letter, then lowercase letters and digits", o.Name)
	}
	if token.IsKeyword(o.Name) || types.Universe.Lookup(o.Name) != nil || o.Name == "main" || o.Name == "init" {
		return data{}, usagef("NAME %s: the service's domain package is named after it, and %s is Go's", o.Name, o.Name)
	}
	switch o.Kind {
	case "consumer", "producer", "both":
	default:
		return data{}, usagef("KIND %q: one of consumer, producer, both", o.Kind)
	}
	for _, s := range contracts.Services() {
		if s.Name == o.Name {
			return data{}, usagef("the registry has a service %s already", o.Name)
		}
		if s.Database == o.Name {
			return data{}, usagef("the registry's service %s has the database %s already", s.Name, o.Name)
		}
	}
	if o.Name == "template0" || o.Name == "template1" {
		return data{}, usagef("NAME %s: PostgreSQL has a database %s of its own", o.Name, o.Name)
	}
	switch {
	case len(o.Name) > 39:
		return data{}, usagef("NAME %s: at most 39 characters, so that its PostgreSQL roles (%s_maintenance, 63 bytes at most) and "+
			"Kubernetes names (purge-outbox-%s, 52 at most) stay whole", o.Name, o.Name, o.Name)
	case o.Name == "guest" || o.Name == "app" || strings.HasPrefix(o.Name, "amq"):
		return data{}, usagef("NAME %s: the broker's own (the user guest, the exchange app.events, the prefix amq.)", o.Name)
	}
	if _, err := os.Stat(filepath.Join(o.Root, "deploy", "k8s", o.Name+".yaml")); err == nil {
		return data{}, usagef("deploy/k8s/%s.yaml exists already: the service's manifest would replace it", o.Name)
	}
	if _, err := os.Stat(filepath.Join(o.Root, "services", o.Name)); err == nil {
		return data{}, usagef("services/%s exists already", o.Name)
	}
	if err := refuseComposeName(o.Root, o.Name); err != nil {
		return data{}, err
	}
	mod, err := project.Module(o.Root)
	if err != nil {
		return data{}, err
	}
	goVersion, err := workGoVersion(o.Root)
	if err != nil {
		return data{}, err
	}
	port := nextPort()
	d := data{Module: mod, GoVersion: goVersion, Name: o.Name, Title: strings.ToUpper(o.Name[:1]) + o.Name[1:],
		Upper: strings.ToUpper(o.Name), Pad: strings.Repeat(" ", len(o.Name)), Queue: o.Name + ".events", Port: strconv.Itoa(port)}
	d.Consumer = o.Kind != "producer"
	if d.Consumer {
		if d.Receives, err = firstProducerReceives(o.Root); err != nil {
			return data{}, err
		}
	}
	if o.Kind != "consumer" {
		d.Producer, d.RelayPort = true, strconv.Itoa(port+1)
		d.Event = o.Name + "." + o.Name + ".recorded.v1"
		d.EventConst = "Event" + d.Title + "Recorded" // genevents' name for it
		if _, err := os.Stat(filepath.Join(o.Root, "contracts", "schemas", d.Event+".json")); err == nil {
			return data{}, usagef("contracts/schemas/%s.json exists already", d.Event)
		}
		if d.Consumer {
			d.Receives = append(d.Receives, receive{Name: d.Event, Const: "contracts." + d.EventConst, Payload: o.Name + ".Recorded", Own: true})
		}
	}
	return d, nil
}

// firstProducerReceives are the events a new consumer receives: every event of the
// registry's first producer, each with the payload type contracts has for it, if any.
func firstProducerReceives(root string) ([]receive, error) {
	producer, consts, err := firstProducerEvents(root)
	if err != nil {
		return nil, err
	}
	p, _ := contracts.ServiceNamed(producer)
	if len(p.Publishes) != len(consts) {
		return nil, fmt.Errorf("contracts/registry.go: %s publishes %d events, the registry this program was built with %d", producer, len(consts), len(p.Publishes))
	}
	payloads, err := contractTypes(root)
	if err != nil {
		return nil, err
	}
	var out []receive
	for i, c := range consts {
		r := receive{Name: p.Publishes[i], Const: "contracts." + c, Payload: rawPayload}
		if t := strings.TrimPrefix(c, "Event"); payloads[t] {
			r.Payload = "contracts." + t
		}
		out = append(out, r)
	}
	return out, nil
}

// nextPort is one above the highest port of the registry (its services' and relays') and
// the auditor's.
func nextPort() int {
	high := auditorPort
	for _, s := range contracts.Services() {
		for _, addr := range []string{s.HTTPAddr, s.RelayAddr} {
			if n, err := strconv.Atoi(strings.TrimPrefix(addr, ":")); err == nil {
				high = max(high, n)
			}
		}
	}
	return high + 1
}

// refuseComposeName refuses a name that is already a service of docker-compose.yml (the
// servers, postgres, rabbitmq, prometheus, ...): the generated compose file names the new
// service's containers after it.
func refuseComposeName(root, name string) error {
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		return fmt.Errorf("%s is not this repository: %w", root, err)
	}
	var compose struct {
		Services map[string]any `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		return fmt.Errorf("docker-compose.yml: %w", err)
	}
	for _, n := range []string{name, name + "-relay", "migrate-" + name} {
		if _, ok := compose.Services[n]; ok {
			return usagef("NAME %s: docker-compose.yml has a service %s already", name, n)
		}
	}
	return nil
}

// refuseImportedName refuses a name that is also the name of a package the service's Go
// files import (api, store, events, contracts, inbox, ...): its domain package, named
// after the service, could not be imported beside it.
func refuseImportedName(name string, files map[string][]byte) error {
	own := "/services/" + name + "/internal/" + name
	for _, rel := range slices.Sorted(keys(files)) {
		if !strings.HasSuffix(rel, ".go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), rel, files[rel], parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasSuffix(p, own) {
				continue
			}
			elems := strings.Split(p, "/")
			last := elems[len(elems)-1]
			if regexp.MustCompile(`^v[0-9]+$`).MatchString(last) && len(elems) > 1 {
				last = elems[len(elems)-2]
			}
			if last == name {
				return usagef("NAME %s: the service imports a package %s (%s) already", name, name, p)
			}
		}
	}
	return nil
}

// refuseTemplateIdent refuses a name that the templates' Go code uses as an identifier of
// its own (a variable, parameter, receiver or field: ctx, tx, r, w, id, ...): the
// service's domain package, named after the service, would be shadowed where it is
// used. It renders the templates of d's kind with a name they never use, and looks
// for d's name among their identifiers.
func refuseTemplateIdent(d data) error {
	probe := d
	probe.Name, probe.Title, probe.Upper = "zzprobe", "Zzprobe", "ZZPROBE"
	for i, r := range probe.Receives {
		if r.Own {
			probe.Receives[i].Payload = "zzprobe.Recorded"
		}
	}
	files, err := render(probe)
	if err != nil {
		return err
	}
	for _, rel := range slices.Sorted(keys(files)) {
		if !strings.HasSuffix(rel, ".go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), rel, files[rel], 0)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		found := false
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == d.Name {
				found = true
			}
			return !found
		})
		if found {
			return usagef("NAME %s: the service's code uses %s as a name of its own (%s)", d.Name, d.Name, strings.Replace(rel, "zzprobe", d.Name, -1))
		}
	}
	return nil
}

// render renders the templates of template/common, and those of template/service for a
// service that consumes (KIND=consumer or both) or of template/producer for one that only
// produces, to services/<name>/<path>, [name] in a path replaced by the name, and for a
// producer template/schema.json.tmpl to its event's schema; Go files are gofmt'ed, and a template that renders to nothing but space is left out.
func render(d data) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := fs.WalkDir(templates, "template", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, ok := strings.CutSuffix(strings.TrimPrefix(p, "template/"), ".tmpl")
		if !ok {
			return fmt.Errorf("%s: a template's name ends in .tmpl", p)
		}
		switch {
		case rel == "schema.json":
			if !d.Producer {
				return nil
			}
			rel = "contracts/schemas/" + d.Event + ".json"
		default:
			tree, file, _ := strings.Cut(rel, "/")
			switch {
			case tree == "service" && !d.Consumer, tree == "producer" && d.Consumer:
				return nil
			case tree != "common" && tree != "service" && tree != "producer":
				return fmt.Errorf("%s: a template is schema.json.tmpl or under common/, service/ or producer/", p)
			}
			rel = "services/" + d.Name + "/" + strings.ReplaceAll(file, "[name]", d.Name)
		}
		src, err := templates.ReadFile(p)
		if err != nil {
			return err
		}
		t, err := template.New(path.Base(p)).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return err
		}
		if len(bytes.TrimSpace(b.Bytes())) == 0 {
			return nil
		}
		if _, dup := out[rel]; dup {
			return usagef("NAME %s: %s would be two files of the service at once", d.Name, rel)
		}
		src = b.Bytes()
		if strings.HasSuffix(rel, ".go") {
			if src, err = format.Source(src); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		out[rel] = src
		return nil
	})
	return out, err
}

// writer writes files under root and remembers them.
type writer struct {
	root  string
	wrote []string
}

func (w *writer) write(rel string, b []byte) error {
	name := filepath.Join(w.root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		return err
	}
	w.wrote = append(w.wrote, rel)
	return nil
}

func (w *writer) result(d data) Result {
	return Result{Wrote: w.wrote, HTTPAddr: ":" + d.Port}
}

func keys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
