package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"example.com/shop/contracts"
)

// Model is what the templates see: the registry, with the names every deploy file derives
// from a service's name.
type Model struct {
	// Services are every service of the registry, in its order.
	Services []Service
	// Producers are the services that publish, Consumers those that receive, in the same
	// order; a service of both kinds is in both.
	Producers, Consumers []Service
	// Events are every event of the schemas, in name order.
	Events []Event
	// RelayUsers is RELAY_USERS as the registry names them: "order=order-relay,...".
	RelayUsers string
	// AuditorPort is the auditor's port, "8085".
	AuditorPort string
	// Modules are the folders of go.work's modules, "contracts", "services/order", ...,
	// in its order.
	Modules []string
}

// Service is one service of the registry and the names derived from it.
type Service struct {
	contracts.Service
	// Title and Upper are its name as "Stock" and "STOCK" (the prefix of its variables;
	// a "-" becomes "_").
	Title, Upper string
	// Port is the port of HTTPAddr, "8082"; RelayPort that of RelayAddr, or empty.
	Port, RelayPort string
	// Producer and Consumer tell its kinds.
	Producer, Consumer bool
	// Queue and DeadLetterQueue are its queues, empty unless it is a consumer.
	Queue, DeadLetterQueue string
	// RelayUser is its relay's broker user, empty unless it is a producer.
	RelayUser string
}

// Event is one event: its name, its constant, who publishes and who receives it.
type Event struct {
	// Name is its name, e.g. "order.order.placed.v1"; Camel is it as "orderPlaced" (the
	// constant without Event, first letter lower).
	Name, Camel string
	// What is what happened, from its schema's description: "An order moved from draft
	// to placed."
	What string
	// Producer is the service that publishes it.
	Producer string
	// Consumers are the services that receive it, in the registry's order.
	Consumers []string
}

// NewModel checks the registry (Validate), then reads it, and each event's description
// from its schema in root/contracts/schemas.
func NewModel(root string) (*Model, error) {
	m := &Model{RelayUsers: contracts.RelayUsers(), AuditorPort: "8085"}
	if err := Validate(contracts.Services(), m.AuditorPort); err != nil {
		return nil, fmt.Errorf("the registry (contracts/registry.go): %w", err)
	}
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	for _, m2 := range regexp.MustCompile(`(?m)^\s*\./(\S+)\s*$`).FindAllStringSubmatch(string(work), -1) {
		m.Modules = append(m.Modules, m2[1])
	}
	for _, s := range contracts.Services() {
		v := Service{Service: s, Title: title(s.Name), Upper: strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_")),
			Producer: len(s.Publishes) > 0, Consumer: len(s.Receives) > 0}
		v.Port, _ = addrPort(s.HTTPAddr) // Validate checked it
		if s.RelayAddr != "" {
			v.RelayPort, _ = addrPort(s.RelayAddr)
		}
		if p, ok := producerNamed(s.Name); ok {
			v.RelayUser = p.RelayUser
		}
		if c, ok := contracts.ConsumerNamed(s.Name); ok {
			v.Queue, v.DeadLetterQueue = c.Queue, c.DeadLetterQueue
		}
		m.Services = append(m.Services, v)
		if v.Producer {
			m.Producers = append(m.Producers, v)
		}
		if v.Consumer {
			m.Consumers = append(m.Consumers, v)
		}
	}
	for _, name := range contracts.EventNames() {
		what, err := eventWhat(root, name)
		if err != nil {
			return nil, err
		}
		e := Event{Name: name, Camel: camel(name), What: what}
		p, ok := contracts.ProducerOf(name)
		if !ok {
			return nil, fmt.Errorf("contracts/schemas/%s.json: no service of the registry publishes %s: add it to one service's Publishes (contracts/registry.go)", name, name)
		}
		e.Producer = p.Name
		for _, c := range contracts.ConsumersOf(name) {
			e.Consumers = append(e.Consumers, c.Name)
		}
		m.Events = append(m.Events, e)
	}
	return m, nil
}

// eventWhat is the description of the event's schema after "Payload of <name>: ",
// first letter upper: what happened.
func eventWhat(root, name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "contracts", "schemas", name+".json"))
	if err != nil {
		return "", err
	}
	var s struct {
		Description string `json:"description"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return "", fmt.Errorf("contracts/schemas/%s.json: %w", name, err)
	}
	what, ok := strings.CutPrefix(s.Description, "Payload of "+name+": ")
	if !ok || what == "" {
		return "", fmt.Errorf("contracts/schemas/%s.json: its description does not start %q", name, "Payload of "+name+": ")
	}
	return strings.ToUpper(what[:1]) + what[1:], nil
}

func producerNamed(name string) (contracts.Producer, bool) {
	producers := contracts.Producers()
	i := slices.IndexFunc(producers, func(p contracts.Producer) bool { return p.Name == name })
	if i < 0 {
		return contracts.Producer{}, false
	}
	return producers[i], true
}

// view is what one rendering of a template sees: the model, and for a template of each
// service, producer or consumer, that service as S.
type view struct {
	*Model
	// S is the service a per-service template is rendered for; nil for the others.
	S *Service
	// Path is the file it renders to.
	Path string
}

// views returns the renderings of the template whose output path is rel.
func (m *Model) views(rel string) []view {
	for _, kind := range []struct {
		key  string
		list []Service
	}{{"[service]", m.Services}, {"[producer]", m.Producers}, {"[consumer]", m.Consumers}} {
		if !strings.Contains(rel, kind.key) {
			continue
		}
		var out []view
		for i := range kind.list {
			out = append(out, view{Model: m, S: &kind.list[i], Path: strings.ReplaceAll(rel, kind.key, kind.list[i].Name)})
		}
		return out
	}
	return []view{{Model: m, Path: rel}}
}

// title is name with its first letter and each letter after "-" or "_" in upper case,
// those dropped: "stock" is "Stock", "order-api" "OrderApi".
func title(name string) string {
	var b strings.Builder
	up := true
	for _, r := range name {
		switch {
		case r == '-' || r == '_':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// camel is an event's name as its constant without Event, first letter lower:
// order.order.placed.v1 is "orderPlaced", stock.reservation.confirmed.v1
// "stockReservationConfirmed".
func camel(event string) string {
	parts := strings.Split(event, ".")
	if len(parts) != 4 {
		return event
	}
	words := []string{parts[0], parts[1], parts[2]}
	if parts[1] == parts[0] {
		words = []string{parts[0], parts[2]}
	}
	if parts[3] != "v1" {
		words = append(words, parts[3])
	}
	s := title(strings.Join(words, "_"))
	return strings.ToLower(s[:1]) + s[1:]
}
