package contracts_test

import (
	"maps"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"example.com/shop/contracts"
)

// asyncAPI is the part of contracts/asyncapi.yaml the test compares.
type asyncAPI struct {
	AsyncAPI string `yaml:"asyncapi"`
	Channels map[string]struct {
		Address  string         `yaml:"address"`
		Messages map[string]ref `yaml:"messages"`
		Bindings struct {
			AMQP struct {
				Is       string `yaml:"is"`
				Exchange struct {
					Name string `yaml:"name"`
					Type string `yaml:"type"`
				} `yaml:"exchange"`
				Queue struct {
					Name string `yaml:"name"`
				} `yaml:"queue"`
			} `yaml:"amqp"`
		} `yaml:"bindings"`
	} `yaml:"channels"`
	Operations map[string]struct {
		Action  string `yaml:"action"`
		Channel ref    `yaml:"channel"`
	} `yaml:"operations"`
	Components struct {
		Messages map[string]struct {
			Name    string `yaml:"name"`
			Headers ref    `yaml:"headers"`
			Payload struct {
				Schema struct {
					AllOf []struct {
						Ref        string `yaml:"$ref"`
						Properties struct {
							EventName struct {
								Const string `yaml:"const"`
							} `yaml:"event_name"`
							Payload ref `yaml:"payload"`
						} `yaml:"properties"`
					} `yaml:"allOf"`
				} `yaml:"schema"`
			} `yaml:"payload"`
		} `yaml:"messages"`
		Schemas map[string]struct {
			Required   []string       `yaml:"required"`
			Properties map[string]any `yaml:"properties"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

type ref struct {
	Ref string `yaml:"$ref"`
}

func readAsyncAPI(t *testing.T) asyncAPI {
	t.Helper()
	raw, err := os.ReadFile("asyncapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc asyncAPI
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("asyncapi.yaml: %v", err)
	}
	return doc
}

// messageOf resolves a "#/components/messages/<key>" reference to the message name.
func messageOf(t *testing.T, doc asyncAPI, r ref) string {
	t.Helper()
	key, ok := strings.CutPrefix(r.Ref, "#/components/messages/")
	m, found := doc.Components.Messages[key]
	if !ok || !found {
		t.Fatalf("reference %q names no message of components.messages", r.Ref)
	}
	return m.Name
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

// The AsyncAPI document, rendered by `make generate` from the registry and the schemas
// (e2e/cmd/generate checks that it is current), describes the broker names, events,
// queues, schemas and headers of package contracts: its template writes the exchange,
// the schema paths and the headers by hand, so they are checked here, with every
// reference resolving and each channel carrying what the registry puts there.
func TestAsyncAPIMatchesTheContract(t *testing.T) {
	t.Parallel()
	doc := readAsyncAPI(t)
	if doc.AsyncAPI != "3.0.0" {
		t.Fatalf("asyncapi %q, want 3.0.0", doc.AsyncAPI)
	}

	// Routing-key channels: one per event, on the exchange; queue channels: each
	// consumer's queue and dead-letter queue with the events bound to it.
	var routed []string
	queues := map[string][]string{} // queue -> event names
	for name, ch := range doc.Channels {
		var events []string
		for _, m := range ch.Messages {
			events = append(events, messageOf(t, doc, m))
		}
		switch b := ch.Bindings.AMQP; b.Is {
		case "routingKey":
			if b.Exchange.Name != contracts.Exchange || b.Exchange.Type != "topic" {
				t.Errorf("channel %s: exchange %q (%s), want %s (topic)", name, b.Exchange.Name, b.Exchange.Type, contracts.Exchange)
			}
			if !slices.Equal(events, []string{ch.Address}) {
				t.Errorf("channel %s: address %q carries %v, want its own event only", name, ch.Address, events)
			}
			routed = append(routed, ch.Address)
		case "queue":
			if b.Queue.Name != ch.Address {
				t.Errorf("channel %s: queue binding %q, address %q", name, b.Queue.Name, ch.Address)
			}
			queues[ch.Address] = sorted(events)
		default:
			t.Errorf("channel %s: amqp binding is %q, want routingKey or queue", name, b.Is)
		}
	}
	if got, want := sorted(routed), sorted(contracts.EventNames()); !slices.Equal(got, want) {
		t.Errorf("routing-key channels %v, want the events %v", got, want)
	}
	wantQueues := map[string][]string{}
	for _, c := range contracts.Consumers() {
		wantQueues[c.Queue] = sorted(c.Events)
		wantQueues[c.DeadLetterQueue] = sorted(c.Events)
	}
	if !maps.EqualFunc(queues, wantQueues, slices.Equal) {
		t.Errorf("queue channels %v, want the registry's %v", queues, wantQueues)
	}

	// Operations: a relay sends on an event's channel, a consumer receives from a queue.
	for name, op := range doc.Operations {
		key, _ := strings.CutPrefix(op.Channel.Ref, "#/channels/")
		ch, ok := doc.Channels[key]
		if !ok {
			t.Errorf("operation %s: channel %q is not in channels", name, op.Channel.Ref)
			continue
		}
		if want := map[string]string{"send": "routingKey", "receive": "queue"}[op.Action]; ch.Bindings.AMQP.Is != want {
			t.Errorf("operation %s: %s on channel %s (%s)", name, op.Action, key, ch.Bindings.AMQP.Is)
		}
	}

	// Messages: the envelope schema with the event's payload schema, both files
	// of schemas/, and the headers schema.
	for key, m := range doc.Components.Messages {
		all := m.Payload.Schema.AllOf
		if len(all) != 2 || all[0].Ref != "./schemas/envelope.json" || all[1].Properties.EventName.Const != m.Name ||
			all[1].Properties.Payload.Ref != "./schemas/"+m.Name+".json" {
			t.Errorf("message %s: payload schema %+v, want the envelope with event_name %s and schemas/%s.json", key, all, m.Name, m.Name)
		}
		for _, a := range all {
			for _, r := range []string{a.Ref, a.Properties.Payload.Ref} {
				if r == "" {
					continue
				}
				if _, err := os.Stat(path.Clean(r)); err != nil {
					t.Errorf("message %s: schema %s: %v", key, r, err)
				}
			}
		}
		if m.Headers.Ref != "#/components/schemas/headers" {
			t.Errorf("message %s: headers %q, want #/components/schemas/headers", key, m.Headers.Ref)
		}
	}

	h := doc.Components.Schemas["headers"]
	var props []string
	for p := range h.Properties {
		props = append(props, p)
	}
	wantProps := append(contracts.CloudEventsHeaders(), contracts.HeaderTraceparent, contracts.HeaderTracestate)
	if !slices.Equal(sorted(props), sorted(wantProps)) {
		t.Errorf("header properties %v, want %v", sorted(props), sorted(wantProps))
	}
	if !slices.Equal(sorted(h.Required), sorted(contracts.CloudEventsHeaders())) {
		t.Errorf("required headers %v, want the CloudEvents ones %v", h.Required, contracts.CloudEventsHeaders())
	}
}
