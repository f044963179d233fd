package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"example.com/shop/contracts"
)

// producerEdits gives a service of KIND=both its producer half in the files every
// producer is listed in: its event in contracts (EventNames, the fast check's
// digest, the AsyncAPI document), its Producer entry, its own event among the
// events its consumer receives (the registry wants a consumer for every event),
// and the deploy entries of its relay, each a copy of the -like-producer's
// relay's, renamed.
func (a *adder) producerEdits() {
	if a.err != nil {
		return
	}
	n, t, p := a.d.Name, a.d.Title, a.likeProducer
	event := "Event" + t + "Recorded"
	a.edit("contracts/contracts.go", func(s string) (string, error) {
		s, err := replaceOnce(s, "\t}\n}\n\n// knownEvent", "\t\t"+event+",\n\t}\n}\n\n// knownEvent")
		if err != nil {
			return "", err
		}
		return replaceOnce(s, "\t}\n\treturn false\n}", "\tcase "+event+":\n\t\treturn true\n\t}\n\treturn false\n}")
	})
	a.edit("contracts/registry.go", func(s string) (string, error) {
		s, err := replaceOnce(s, "\t}\n}\n\n// ProducerOf", "\t\t{Name: Producer"+t+", Events: []string{"+event+"},\n\t\t\tRelayUser: \""+n+"-relay\"},\n\t}\n}\n\n// ProducerOf")
		if err != nil {
			return "", err
		}
		i := strings.Index(s, "\t\t{Name: Consumer"+t+", Queue:")
		j := strings.Index(s[max(i, 0):], "}},\n")
		if i < 0 || j < 0 {
			return "", fmt.Errorf("no Consumer entry of %s", n)
		}
		j += i
		return s[:j] + ", " + event + s[j:], nil
	})
	// Its consumers accept its events only from its relay user (RELAY_USERS).
	for _, file := range []string{"docker-compose.yml", "deploy/k8s/config.yaml"} {
		a.edit(file, func(s string) (string, error) {
			if !strings.Contains(s, "RELAY_USERS: ") {
				return "", fmt.Errorf("no RELAY_USERS")
			}
			return regexp.MustCompile(`(RELAY_USERS: \S+)`).ReplaceAllString(s, "${1},"+n+"="+n+"-relay"), nil
		})
	}
	a.edit("contracts/schemas/envelope.json", func(s string) (string, error) {
		i := strings.Index(s, `"enum": [`)
		j := strings.Index(s[max(i, 0):], "\n      ]")
		if i < 0 || j < 0 {
			return "", fmt.Errorf("no enum of event names")
		}
		j += i
		return s[:j] + ",\n        " + strconv.Quote(a.d.Event) + s[j:], nil
	})
	// The contract's tests: a sample payload of the event, and the count of events
	// the fast check was written for (it leaves the new one to the schema library).
	a.edit("contracts/contracts_test.go", func(s string) (string, error) {
		return replaceOnce(s, "\t}\n\treturn p\n}", "\tcase contracts."+event+":\n\t\treturn contracts."+t+
			"Recorded{EventID: p.OrderID, EventName: contracts.EventOrderPlaced}\n\t}\n\treturn p\n}")
	})
	a.edit("contracts/fastcheck_test.go", func(s string) (string, error) {
		m := regexp.MustCompile(`got != (\d+) \{\n(.*)was written for \d+ \((\d+) checked, (\d+) left`).FindStringSubmatch(s)
		if m == nil {
			return "", fmt.Errorf("no count of the events fastValid was written for")
		}
		total, _ := strconv.Atoi(m[1])
		left, _ := strconv.Atoi(m[4])
		return strings.Replace(s, m[0], fmt.Sprintf("got != %d {\n%swas written for %d (%s checked, %d left", total+1, m[2], total+1, m[3], left+1), 1), nil
	})
	a.edit("contracts/fastcheck.go", func(s string) (string, error) {
		sum, err := schemasSHA256(filepath.Join(a.root, "contracts", "schemas"))
		if err != nil {
			return "", err
		}
		re := regexp.MustCompile(`const fastSchemasSHA256 = "[0-9a-f]+"`)
		if !re.MatchString(s) {
			return "", fmt.Errorf("no fastSchemasSHA256")
		}
		return re.ReplaceAllLiteralString(s, `const fastSchemasSHA256 = "`+sum+`"`), nil
	})
	a.edit("contracts/asyncapi.yaml", a.asyncAPI)

	relay := func(s string) string { return a.renameRelay(s) }
	for _, file := range []string{"docker-compose.yml", "docker-compose.ha.yml"} {
		a.edit(file, func(s string) (string, error) { return cloneBlock(s, "  "+p+"-relay:\n", relay) })
	}
	a.edit("deploy/prometheus/prometheus.yml", func(s string) (string, error) {
		return cloneLines(s, "  - job_name: "+p+"-relay\n", 2, relay)
	})
	a.edit("deploy/postgres/roles.sql", func(s string) (string, error) {
		s, err := cloneLines(s, "--   "+p+"_relay ", 1, func(l string) string { return renameColumn(l, relay) })
		if err != nil {
			return "", err
		}
		return replaceOnce(s, "'"+n+"_app', '"+n+"_maintenance',", "'"+n+"_app', '"+n+"_relay', '"+n+"_maintenance',")
	})
	a.edit("deploy/rabbitmq/definitions.json", func(s string) (string, error) {
		s, err := cloneObject(s, `      "name": "`+p+`-relay",`, func(o string) string {
			o = relay(o)
			i := strings.Index(o, `"password_hash": "`) + len(`"password_hash": "`)
			j := strings.Index(o[i:], `"`)
			return o[:i] + rabbitHash(n+"-relay") + o[i+j:]
		})
		if err != nil {
			return "", err
		}
		if s, err = cloneObject(s, `      "user": "`+p+`-relay",`, relay); err != nil {
			return "", err
		}
		// The topic permission: the routing keys (event names) the relay may publish.
		return cloneObject(s, `      "write": "^`+p+`\\.",`, relay)
	})
	k8s := "deploy/k8s/"
	if b, err := os.ReadFile(filepath.Join(a.root, k8s, p+"-relay.yaml")); err != nil {
		a.fail(err)
	} else {
		a.fail(a.write(k8s+n+"-relay.yaml", []byte(relay(string(b)))))
	}
	a.edit(k8s+"kustomization.yaml", func(s string) (string, error) {
		return cloneLines(s, "  - "+p+"-relay.yaml\n", 1, relay)
	})
	for _, file := range []string{"config.yaml", "pdb.yaml", "networkpolicy.yaml"} {
		a.edit(k8s+file, func(s string) (string, error) { return cloneDoc(s, "\n  name: "+p+"-relay\n", relay) })
	}
	a.edit(k8s+"cronjobs.yaml", func(s string) (string, error) {
		return cloneDoc(s, "\n  name: purge-outbox-"+p+"\n", relay)
	})
	a.edit(k8s+"secret.yaml", func(s string) (string, error) {
		P := strings.ToUpper(p)
		s, err := cloneLines(s, "  "+P+"_RELAY_DATABASE_URL:", 1, relay)
		if err != nil {
			return "", err
		}
		return cloneLines(s, "  "+P+"_RELAY_AMQP_URL:", 1, relay)
	})
	a.edit("deploy/k8s-ha/secret.yaml", func(s string) (string, error) {
		return cloneLines(s, "  "+strings.ToUpper(p)+"_RELAY_DATABASE_URL:", 1, relay)
	})
	a.edit(k8s+"servicemonitor.yaml", func(s string) (string, error) { return addValue(s, n+"-relay") })
}

// asyncAPI adds the producer's event to the AsyncAPI document: its channel on the
// exchange, its message and the relay's send operation, each a copy of the first
// event of the -like-producer's, and the message on the new service's queues and
// receive operation.
func (a *adder) asyncAPI(s string) (string, error) {
	like := a.likeProducerEvent()
	key, newKey := camel(like), a.d.Name+a.d.Title+"Recorded"
	ren := strings.NewReplacer(key, newKey, strings.ToUpper(key[:1])+key[1:], strings.ToUpper(newKey[:1])+newKey[1:],
		like, a.d.Event, "The "+a.likeProducer+" relay", "The "+a.d.Name+" relay")
	line := func(block, field, value string) string {
		re := regexp.MustCompile(`(?m)^(\s+)` + field + `: .*$`)
		done := false
		return re.ReplaceAllStringFunc(block, func(l string) string {
			if done {
				return l
			}
			done = true
			return l[:strings.Index(l, field)] + field + ": " + value
		})
	}
	var err error
	for _, b := range []struct{ header, field, value string }{
		{"  " + key + ":\n", "description", fmt.Sprintf("%q", a.d.Name+" recorded an event of another producer.")},
		{"  publish" + strings.ToUpper(key[:1]) + key[1:] + ":\n", "", ""},
		{"    " + key + ":\n", "title", a.d.Title + " recorded"},
	} {
		if s, err = cloneBlock(s, b.header, func(block string) string {
			block = ren.Replace(block)
			if b.field != "" {
				block = line(block, b.field, b.value)
			}
			return block
		}); err != nil {
			return "", err
		}
	}
	n := a.d.Name
	if s, err = replaceOnce(s, "; dead-letters into "+a.d.Queue+".dlq.", ", and "+a.d.Event+"; dead-letters into "+a.d.Queue+".dlq."); err != nil {
		return "", err
	}
	for _, at := range []string{"\n  " + n + "Queue:\n", "\n  " + n + "DeadLetters:\n", "\n  " + n + "Receives:\n"} {
		i := strings.Index(s, at)
		j := strings.Index(s[max(i, 0):], "\n    messages:\n")
		if i < 0 || j < 0 {
			return "", fmt.Errorf("no messages under %s", strings.TrimSpace(at))
		}
		j += i + len("\n    messages:\n")
		add := "      " + newKey + ":\n        $ref: '#/components/messages/" + newKey + "'\n"
		if strings.HasSuffix(at, "Receives:\n") {
			add = "      - $ref: '#/channels/" + n + "Queue/messages/" + newKey + "'\n"
		}
		s = s[:j] + add + s[j:]
	}
	return s, nil
}

// likeProducerEvent is the first event of the -like-producer (Add checked it has one).
func (a *adder) likeProducerEvent() string {
	p, _ := producerNamed(a.likeProducer)
	return p.Events[0]
}

// producerNamed is the producer of the registry called name.
func producerNamed(name string) (contracts.Producer, bool) {
	for _, p := range contracts.Producers() {
		if p.Name == name && len(p.Events) > 0 {
			return p, true
		}
	}
	return contracts.Producer{}, false
}

// camel is the AsyncAPI key of an event name: stock.reservation.confirmed.v1 is
// stockReservationConfirmed.
func camel(event string) string {
	parts := strings.Split(strings.TrimSuffix(event, ".v1"), ".")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// renameRelay turns a copy of the -like-producer's relay text into the new
// service's: its name in three spellings, its serve port and its relay port.
func (a *adder) renameRelay(s string) string {
	p, n := a.likeProducer, a.d.Name
	s = strings.NewReplacer(p, n, strings.ToUpper(p[:1])+p[1:], a.d.Title, strings.ToUpper(p), a.d.Upper).Replace(s)
	return strings.NewReplacer(a.likeProducerPorts[0], strings.TrimPrefix(a.d.HTTPAddr, ":"),
		a.likeProducerPorts[1], strings.TrimPrefix(a.d.RelayAddr, ":")).Replace(s)
}

// schemasSHA256 is contracts' schemasSHA256 over the folder dir: every file in
// name order, each name and content without its "$id" line.
func schemasSHA256(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	h := sha256.New()
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(schemaID.ReplaceAll(data, nil))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var schemaID = regexp.MustCompile(`(?m)^[ \t]*"\$id":.*\n`)
