package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"go/format"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"golang.org/x/mod/modfile"

	"example.com/shop/contracts"
)

//go:embed template
var templates embed.FS

// Options is one service to add: its name and kind, the consumer whose deploy
// entries its own copy, and the repository.
type Options struct {
	Name, Kind, Like, LikeProducer, Root string
}

// data is what the templates see.
type data struct {
	Module   string // the workspace's module path prefix
	Name     string // billing
	Title    string // Billing
	Upper    string // BILLING
	Role     string // the prefix of its database roles (billing)
	Queue    string // billing.events
	Database string // billing
	HTTPAddr string // :8088
	// A producer's (KIND=both) only:
	Produces  bool   // KIND=both
	Event     string // billing.billing.recorded.v1, its one event
	RelayAddr string // :8089, its relay's default HTTP_ADDR
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// Add adds the service o names and returns the files it wrote or changed. It
// refuses, before writing, a bad name or kind, a name the registry or
// services/ has already, and a -like that is no consumer of the registry.
func Add(o Options) ([]string, error) {
	if !nameRE.MatchString(o.Name) {
		return nil, usagef("NAME %q: a service name is a lowercase letter, then lowercase letters and digits", o.Name)
	}
	if o.Kind == "producer" {
		return nil, usagef("KIND=producer: add it with KIND=both, then drop its consumer half (step 8 of docs/architecture.md)")
	}
	if o.Kind != "consumer" && o.Kind != "both" {
		return nil, usagef("KIND %q: one of consumer, both", o.Kind)
	}
	if _, ok := contracts.ServiceNamed(o.Name); ok {
		return nil, usagef("the registry has a service %s already", o.Name)
	}
	if _, ok := contracts.ConsumerNamed(o.Like); !ok {
		return nil, usagef("-like %s is no consumer of the registry", o.Like)
	}
	if _, ok := producerNamed(o.LikeProducer); o.Kind == "both" && !ok {
		return nil, usagef("-like-producer %s is no producer of the registry", o.LikeProducer)
	}
	if _, err := os.Stat(filepath.Join(o.Root, "services", o.Name)); err == nil {
		return nil, usagef("services/%s exists already", o.Name)
	}
	mod, err := workspaceModule(o.Root)
	if err != nil {
		return nil, err
	}
	port, err := freePort(o.Root)
	if err != nil {
		return nil, err
	}
	d := data{Module: mod, Name: o.Name, Title: strings.ToUpper(o.Name[:1]) + o.Name[1:], Upper: strings.ToUpper(o.Name),
		Role: o.Name, Queue: o.Name + ".events", Database: o.Name, HTTPAddr: ":" + strconv.Itoa(port)}
	if o.Kind == "both" {
		d.Produces, d.Event, d.RelayAddr = true, o.Name+"."+o.Name+".recorded.v1", ":"+strconv.Itoa(port+1)
	}
	a := adder{root: o.Root, d: d, like: o.Like}
	likeSvc, _ := contracts.ServiceNamed(o.Like)
	a.likePort = strings.TrimPrefix(likeSvc.HTTPAddr, ":")
	if d.Produces {
		a.likeProducer = o.LikeProducer
		if a.likeProducerPorts, err = producerPorts(o.Root, o.LikeProducer); err != nil {
			return nil, err
		}
	}
	a.writeTemplates()
	a.goMod()
	a.edits()
	if d.Produces {
		a.producerEdits()
	}
	if a.err != nil {
		return a.files, a.err
	}
	slices.Sort(a.files)
	return slices.Compact(a.files), nil
}

// adder collects the files it touched and the first error.
type adder struct {
	root, like, likePort string
	likeProducer         string    // KIND=both: the producer whose relay's entries the new ones copy
	likeProducerPorts    [2]string // its serve's and its relay's port
	d                    data
	files                []string
	err                  error
}

func (a *adder) fail(err error) {
	if a.err == nil && err != nil {
		a.err = err
	}
}

// writeTemplates renders template/<dir>/<file>.tmpl to services/<name>/<place>,
// and, for a producer, template/contracts to its event's Go file and JSON Schema
// in contracts.
func (a *adder) writeTemplates() {
	places := map[string]string{
		"cmd": "cmd/" + a.d.Name, "events": "internal/events", "store": "internal/store",
		"api": "internal/api", "migrations": "migrations",
	}
	contractFiles := map[string]string{
		"contracts/event.go.tmpl": "contracts/" + a.d.Name + ".go", "contracts/schema.json.tmpl": "contracts/schemas/" + a.d.Event + ".json",
	}
	a.fail(fs.WalkDir(templates, "template", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(p, "template/")
		dir, file := path.Split(rel)
		to := path.Join("services", a.d.Name, places[strings.TrimSuffix(dir, "/")], strings.TrimSuffix(file, ".tmpl"))
		if dir == "contracts/" {
			if !a.d.Produces {
				return nil
			}
			to = contractFiles[rel]
		}
		src, err := templates.ReadFile(p)
		if err != nil {
			return err
		}
		t, err := template.New(rel).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if err := t.Execute(&out, a.d); err != nil {
			return err
		}
		b := out.Bytes()
		if strings.HasSuffix(to, ".go") {
			if b, err = format.Source(b); err != nil {
				return fmt.Errorf("%s: %w", to, err)
			}
		}
		return a.write(to, b)
	}))
}

func (a *adder) write(rel string, b []byte) error {
	name := filepath.Join(a.root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		return err
	}
	a.files = append(a.files, rel)
	return nil
}

// goMod writes the module's go.mod from the -like service's (its requirements
// are a superset of the new one's), adds it to go.work, then tidies it.
func (a *adder) goMod() {
	if a.err != nil {
		return
	}
	likeDir := filepath.Join(a.root, "services", a.like)
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(likeDir, f))
		if err != nil {
			a.fail(err)
			return
		}
		if f == "go.mod" {
			mf, err := modfile.Parse(f, b, nil)
			if err != nil {
				a.fail(err)
				return
			}
			a.fail(mf.AddModuleStmt(a.d.Module + "/services/" + a.d.Name))
			if b, err = mf.Format(); err != nil {
				a.fail(err)
				return
			}
		}
		a.fail(a.write("services/"+a.d.Name+"/"+f, b))
	}
	work := filepath.Join(a.root, "go.work")
	b, err := os.ReadFile(work)
	if err != nil {
		a.fail(err)
		return
	}
	wf, err := modfile.ParseWork(work, b, nil)
	if err != nil {
		a.fail(err)
		return
	}
	a.fail(wf.AddUse("./services/"+a.d.Name, ""))
	wf.SortBlocks()
	wf.Cleanup()
	a.fail(os.WriteFile(work, modfile.Format(wf.Syntax), 0o644))
	a.files = append(a.files, "go.work")
	if a.err != nil {
		return
	}
	cmd := exec.Command("go", "mod", "tidy")
	cmd.Dir = filepath.Join(a.root, "services", a.d.Name)
	if out, err := cmd.CombinedOutput(); err != nil {
		a.fail(fmt.Errorf("go mod tidy in services/%s: %v\n%s", a.d.Name, err, out))
	}
}

// workspaceModule returns the module path prefix of the repository at root: the
// module path of its contracts module without "/contracts".
func workspaceModule(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "contracts", "go.mod"))
	if err != nil {
		return "", fmt.Errorf("%s is not this repository: %w", root, err)
	}
	p := modfile.ModulePath(b)
	if !strings.HasSuffix(p, "/contracts") {
		return "", fmt.Errorf("contracts/go.mod: module %q does not end in /contracts", p)
	}
	return strings.TrimSuffix(p, "/contracts"), nil
}

// freePort is one above the highest port a service of the registry or a process
// of docker-compose.yml listens on.
func freePort(root string) (int, error) {
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		return 0, err
	}
	high := 0
	for _, m := range regexp.MustCompile(`HTTP_ADDR: *":(\d+)"`).FindAllStringSubmatch(string(b), -1) {
		n, _ := strconv.Atoi(m[1])
		high = max(high, n)
	}
	for _, s := range contracts.Services() {
		n, _ := strconv.Atoi(strings.TrimPrefix(s.HTTPAddr, ":"))
		high = max(high, n)
	}
	if high == 0 {
		return 0, fmt.Errorf("docker-compose.yml and the registry name no port")
	}
	return high + 1, nil
}

// producerPorts returns the ports of producer's serve (from the registry) and of
// its relay (the HTTP_ADDR of its relay in docker-compose.yml).
func producerPorts(root, producer string) ([2]string, error) {
	svc, _ := contracts.ServiceNamed(producer)
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		return [2]string{}, err
	}
	s := string(b)
	i := lineStart(s, "  "+producer+"-relay:\n")
	if i < 0 {
		return [2]string{}, fmt.Errorf("docker-compose.yml has no service %s-relay", producer)
	}
	block := s[i:]
	if next := regexp.MustCompile(`\n  [^ \n]`).FindStringIndex(block); next != nil {
		block = block[:next[0]]
	}
	m := regexp.MustCompile(`HTTP_ADDR: *":(\d+)"`).FindStringSubmatch(block)
	if m == nil {
		return [2]string{}, fmt.Errorf("docker-compose.yml: %s-relay has no HTTP_ADDR", producer)
	}
	return [2]string{strings.TrimPrefix(svc.HTTPAddr, ":"), m[1]}, nil
}

// rabbitHash is RabbitMQ's rabbit_password_hashing_sha256 of password: base64 of
// a 4-byte salt and SHA-256(salt + password).
func rabbitHash(password string) string {
	salt := make([]byte, 4)
	_, _ = rand.Read(salt) // crypto/rand.Read never fails
	sum := sha256.Sum256(append(slices.Clone(salt), password...))
	return base64.StdEncoding.EncodeToString(append(salt, sum[:]...))
}
