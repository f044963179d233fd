// Package api serves the auditor over HTTP: the journey of an order or event, the
// audit's report, the live page's data, and the live page itself (plain HTML, CSS and
// JavaScript embedded in the binary).
package api

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/platform/httpx"
	"example.com/shop/services/auditor/internal/auditor"
	"example.com/shop/services/auditor/internal/probe"
	"example.com/shop/services/auditor/internal/store"
)

//go:embed page
var pageFS embed.FS

// BoardRows is the number of orders the live page shows.
const BoardRows = 15

// boardMaxAge is how long one /board answer is reused, so that many open pages cost
// the databases no more than one.
const boardMaxAge = 500 * time.Millisecond

// API holds the handlers' dependencies.
type API struct {
	auditor  *auditor.Audit
	journeys *auditor.Journeys
	st       *store.Store
	probe    *probe.Probe
	topo     Topology
	openapi  []byte
	errs     *httpx.Errors

	mu      sync.Mutex
	boardAt time.Time
	last    Board
}

// New returns the API. topo is what the live page shows (production passes the
// registry's, [RegistryTopology]); openapi is the OpenAPI document served at
// /openapi.yaml.
func New(audit *auditor.Audit, journeys *auditor.Journeys, st *store.Store, pr *probe.Probe, topo Topology, openapi []byte, logger *slog.Logger) *API {
	return &API{auditor: audit, journeys: journeys, st: st, probe: pr, topo: topo, openapi: openapi,
		errs: httpx.NewErrors(logger, errorRules()...)}
}

func (a *API) page(w http.ResponseWriter, r *http.Request) {
	http.ServeFileFS(w, r, pageFS, "page/index.html")
}

func (a *API) static(w http.ResponseWriter, r *http.Request) {
	sub, _ := fs.Sub(pageFS, "page") // "page" is embedded: Sub cannot fail
	http.StripPrefix("/static/", http.FileServerFS(sub)).ServeHTTP(w, r)
}

func (a *API) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(a.openapi)
}

func (a *API) audit(w http.ResponseWriter, _ *http.Request) {
	httpx.WriteJSON(w, http.StatusOK, a.auditor.Report())
}

func (a *API) orderJourney(w http.ResponseWriter, r *http.Request) error {
	id, err := httpx.PathUUID(r, "id")
	if err != nil {
		return err
	}
	j, err := a.journeys.Order(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, j)
	return nil
}

func (a *API) eventJourney(w http.ResponseWriter, r *http.Request) error {
	id, err := httpx.PathUUID(r, "event_id")
	if err != nil {
		return err
	}
	j, err := a.journeys.Event(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, j)
	return nil
}

// Board is the live page's data: the topology it draws, the latest orders, the counters
// and the audit. Producer names the producer of the order's events, AnswerProducers
// those whose events answer them (the events of another producer that Producer
// receives). Consumers names the request leg's consumer columns: the consumers of the
// order's events, in the topology's order; AnswerConsumers the answer leg's: the
// consumers of the answers. [Topology.Board] fills these fields.
type Board struct {
	Flow            Flow               `json:"flow"`
	Producer        string             `json:"producer"`
	AnswerProducers []string           `json:"answer_producers"`
	Consumers       []string           `json:"consumers"`
	AnswerConsumers []string           `json:"answer_consumers"`
	Orders          []auditor.BoardRow `json:"orders"`
	Counters        Counters           `json:"counters"`
	Audit           auditor.Report     `json:"audit"`
	Grace           float64            `json:"grace_seconds"`
	At              time.Time          `json:"at"`
}

// Flow is what the page's diagram draws: each producer with the consumers of its
// events, and every consumer, in the topology's order.
type Flow struct {
	Producers []FlowProducer `json:"producers"`
	Consumers []string       `json:"consumers"`
}

// FlowProducer is one producer of the diagram: its relay carries its events to each of
// Consumers.
type FlowProducer struct {
	Name      string   `json:"name"`
	Consumers []string `json:"consumers"`
}

// Counters are the live page's totals. A nil count could not be read (its source is
// named in Notes).
type Counters struct {
	Published         *int64            `json:"published"`
	DuplicatesSkipped *float64          `json:"duplicates_skipped"`
	Retries           *float64          `json:"retries"`
	DeadLetters       *int              `json:"dead_letters"`
	Unaccounted       int               `json:"unaccounted"`
	Unanswered        int               `json:"unanswered"`
	PerConsumer       map[string]Detail `json:"per_consumer"`
	Notes             []string          `json:"notes,omitempty"`
}

// Detail is one consumer's share of the counters.
type Detail struct {
	DuplicatesSkipped *float64 `json:"duplicates_skipped"`
	Retries           *float64 `json:"retries"`
	DeadLetters       *int     `json:"dead_letters"`
}

func (a *API) board(w http.ResponseWriter, r *http.Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.boardAt) > boardMaxAge {
		b, err := a.readBoard(r.Context())
		if err != nil {
			return err
		}
		a.last, a.boardAt = b, time.Now()
	}
	httpx.WriteJSON(w, http.StatusOK, a.last)
	return nil
}

func (a *API) readBoard(ctx context.Context) (Board, error) {
	rows, err := a.journeys.Board(ctx, BoardRows)
	if err != nil {
		return Board{}, err
	}
	rep := a.auditor.Report()
	b := a.topo.Board()
	b.Orders, b.Audit, b.Grace, b.At = rows, rep, a.auditor.Grace().Seconds(), time.Now()
	c := &b.Counters
	c.Unaccounted, c.Unanswered = rep.UnaccountedTotal, rep.Unanswered
	c.PerConsumer = map[string]Detail{}
	if n, err := a.auditor.PublishedTotal(ctx); err == nil {
		c.Published = &n
	} else {
		c.Notes = append(c.Notes, "published: "+err.Error())
	}

	const dups, retries = "inbox_duplicates_total", "amqp_consumer_retries_total"
	scraped, err := a.probe.Counters(ctx, dups, retries)
	if err != nil {
		c.Notes = append(c.Notes, err.Error())
	}
	for _, con := range a.topo.Consumers {
		var d Detail
		if v, ok := scraped[con.Name]; ok {
			dv, rv := v[dups], v[retries]
			d.DuplicatesSkipped, d.Retries = &dv, &rv
			c.DuplicatesSkipped = add(c.DuplicatesSkipped, dv)
			c.Retries = add(c.Retries, rv)
		}
		if n, ok := a.deadLetters(ctx, con, c); ok {
			d.DeadLetters = &n
			total := n
			if c.DeadLetters != nil {
				total += *c.DeadLetters
			}
			c.DeadLetters = &total
		}
		c.PerConsumer[con.Name] = d
	}
	return b, nil
}

// deadLetters counts consumer con's messages in its dead-letter queue: its unresolved
// dead_letter rows, or, for a database without that table, the queue's depth read
// with a passive declare.
func (a *API) deadLetters(ctx context.Context, con contracts.Consumer, c *Counters) (int, bool) {
	n, ok, err := a.st.UnresolvedDeadLetters(ctx, con.Name)
	if err == nil && ok {
		return n, true
	}
	if err != nil {
		c.Notes = append(c.Notes, err.Error())
	}
	depths, err := a.probe.QueueDepths(ctx, con.DeadLetterQueue)
	if err != nil {
		c.Notes = append(c.Notes, "dead letters of "+con.Name+": "+err.Error())
		return 0, false
	}
	return depths[con.DeadLetterQueue], true
}

// Topology is what the live page shows: every producer with the events it
// publishes and every consumer with the events it receives, in the order the page
// lists them.
type Topology struct {
	Producers []contracts.Producer
	Consumers []contracts.Consumer
}

// RegistryTopology returns the registry's topology: contracts.Producers and
// contracts.Consumers.
func RegistryTopology() Topology {
	return Topology{Producers: contracts.Producers(), Consumers: contracts.Consumers()}
}

// Board returns a board of t with no orders: its flow and its two legs. The request
// leg is the order's own producer (the one of contracts.EventOrderPlaced) and the
// consumers of its events; the answer leg the other producers whose events that
// producer receives, and the consumers of those events. A producer of neither leg is
// drawn in the flow only: its events belong to no order's journey.
func (t Topology) Board() Board {
	b := Board{Flow: Flow{Producers: []FlowProducer{}, Consumers: []string{}},
		AnswerProducers: []string{}, Consumers: []string{}, AnswerConsumers: []string{}, Orders: []auditor.BoardRow{}}
	var own contracts.Producer
	for _, p := range t.Producers {
		if p.Publishes(contracts.EventOrderPlaced) {
			own = p
		}
	}
	b.Producer = own.Name
	var back contracts.Consumer // the order's producer as a consumer: what it receives are its answers
	for _, c := range t.Consumers {
		if c.Name == own.Name {
			back = c
		}
	}
	answer := func(event string) bool { return !own.Publishes(event) && back.Receives(event) }
	for _, p := range t.Producers {
		if p.Name != own.Name && slices.ContainsFunc(p.Events, answer) {
			b.AnswerProducers = append(b.AnswerProducers, p.Name)
		}
		fp := FlowProducer{Name: p.Name, Consumers: []string{}}
		for _, c := range t.Consumers {
			if slices.ContainsFunc(c.Events, p.Publishes) {
				fp.Consumers = append(fp.Consumers, c.Name)
			}
		}
		b.Flow.Producers = append(b.Flow.Producers, fp)
	}
	for _, c := range t.Consumers {
		b.Flow.Consumers = append(b.Flow.Consumers, c.Name)
		if slices.ContainsFunc(c.Events, own.Publishes) {
			b.Consumers = append(b.Consumers, c.Name)
		}
		if slices.ContainsFunc(c.Events, answer) {
			b.AnswerConsumers = append(b.AnswerConsumers, c.Name)
		}
	}
	return b
}

func add(p *float64, v float64) *float64 {
	if p != nil {
		v += *p
	}
	return &v
}

// errorRules maps the auditor's errors to problem types for httpx.Errors.Write, the
// one function that answers every failed request (docs/api-problems.md): an unknown
// order or event is a 404; a malformed id is a 400 (httpx.PathUUID); anything else is
// logged and answered with a 500 that reveals nothing internal.
func errorRules() []httpx.Rule {
	return []httpx.Rule{
		{Is: auditor.ErrNotFound, Kind: httpx.KindNotFound, Detail: "no order or event has this id: not found"},
	}
}
