package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"example.com/shop/contracts"
	"example.com/shop/platform/httpx"
	"example.com/shop/services/auditor/internal/api"
	"example.com/shop/services/auditor/internal/auditor"
	"example.com/shop/testkit"
)

// ledgerRecorded is the event of a producer that answers nothing: the order's
// producer does not receive it, and its payload names no order.
const ledgerRecorded = "ledger.entry.recorded.v1"

// topologies are the registries the page is drawn for: the real one, two producers
// and five consumers (one of them, billing, in both legs), and three producers and five
// consumers whose third producer, ledger, answers nothing, as `make service NAME=ledger
// KIND=both` adds it.
func topologies() map[string]api.Topology {
	order, stock := contracts.Producer{Name: "order", Events: []string{contracts.EventOrderPlaced,
		contracts.EventOrderCancelled, contracts.EventOrderConfirmed, contracts.EventOrderRejected}},
		contracts.Producer{Name: "stock", Events: []string{contracts.EventStockReservationConfirmed, contracts.EventStockReservationRejected}}
	consumer := func(name string, events ...string) contracts.Consumer {
		return contracts.Consumer{Name: name, Queue: name + ".events", DeadLetterQueue: name + ".events.dlq", Events: events}
	}
	five := []contracts.Consumer{
		consumer("order", stock.Events...),
		consumer("stock", contracts.EventOrderPlaced, contracts.EventOrderCancelled),
		consumer("shipping", order.Events...),
		consumer("billing", contracts.EventOrderPlaced, contracts.EventOrderConfirmed, contracts.EventStockReservationConfirmed),
		consumer("customer-notifications", contracts.EventOrderPlaced, contracts.EventOrderCancelled, contracts.EventStockReservationRejected),
	}
	ledger := contracts.Producer{Name: "ledger", Events: []string{ledgerRecorded}}
	withLedger := append(slices.Clone(five[:4]), consumer("ledger", append(slices.Clone(order.Events), ledgerRecorded)...))
	return map[string]api.Topology{
		"registry":                {Producers: contracts.Producers(), Consumers: contracts.Consumers()},
		"2 producers 5 consumers": {Producers: []contracts.Producer{order, stock}, Consumers: five},
		"3 producers 5 consumers": {Producers: []contracts.Producer{order, stock, ledger}, Consumers: withLedger},
	}
}

// TestTopologyBoard: the legs of the registry's topology and of one with a producer
// that answers nothing.
func TestTopologyBoard(t *testing.T) {
	for name, want := range map[string][4][]string{
		"registry":                {{"stock"}, {"stock", "shipping"}, {"order"}, {"order", "stock", "shipping"}},
		"2 producers 5 consumers": {{"stock"}, {"stock", "shipping", "billing", "customer-notifications"}, {"order", "billing", "customer-notifications"}, nil},
		"3 producers 5 consumers": {{"stock"}, {"stock", "shipping", "billing", "ledger"}, {"order", "billing"}, nil},
	} {
		b := topologies()[name].Board()
		got := [4][]string{b.AnswerProducers, b.Consumers, b.AnswerConsumers, b.Flow.Consumers}
		if want[3] == nil {
			want[3] = got[3]
		}
		if b.Producer != "order" || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: producer %q, answer producers, consumers, answer consumers, flow consumers %v; want order, %v", name, b.Producer, got, want)
		}
	}
	b := topologies()["3 producers 5 consumers"].Board()
	if got := fmt.Sprint(b.Flow.Producers); got != "[{order [stock shipping billing ledger]} {stock [order billing]} {ledger [ledger]}]" {
		t.Errorf("flow producers %s", got)
	}
}

// geometry is what the page measures of itself (getBoundingClientRect, in CSS pixels
// of the viewport): the flow's SVG, its boxes and arrows, the table's headers and the
// cells of one order's row.
type geometry struct {
	Page  struct{ W float64 } `json:"page"`
	SVG   rect                `json:"svg"`
	Boxes []struct {
		Key  string `json:"key"`
		Rect rect   `json:"rect"`
		Text rect   `json:"text"`
	} `json:"boxes"`
	Arrows []struct {
		ID     string `json:"id"`
		From   string `json:"from"`
		To     string `json:"to"`
		A      point  `json:"a"`
		Z      point  `json:"z"`
		Labels []rect `json:"labels"`
	} `json:"arrows"`
	Headers []string `json:"headers"`
	Cells   []struct {
		Stage, State, Text string
	} `json:"cells"`
}

type rect struct{ L, T, R, B float64 }

type point struct{ X, Y float64 }

// gap is the distance between two rectangles, negative when they overlap.
func (r rect) gap(o rect) float64 {
	return max(o.L-r.R, r.L-o.R, o.T-r.B, r.T-o.B)
}

// holds reports whether r lies inside o, to half a pixel.
func (o rect) holds(r rect) bool {
	return r.L >= o.L-0.5 && r.R <= o.R+0.5 && r.T >= o.T-0.5 && r.B <= o.B+0.5
}

func (o rect) holdsPoint(p point) bool { return o.holds(rect{p.X, p.Y, p.X, p.Y}) }

// measure reads the geometry of the page showing order id.
const measure = `(() => {
  const svg = document.getElementById("flow-svg"), m = svg.getScreenCTM();
  const rect = e => { const r = e.getBoundingClientRect(); return { L: r.left, T: r.top, R: r.right, B: r.bottom }; };
  const pt = p => { const q = p.matrixTransform(m); return { X: q.x, Y: q.y }; };
  return {
    page: { W: document.documentElement.clientWidth },
    svg: rect(svg),
    boxes: [...svg.querySelectorAll("[data-box]")].map(g => ({ key: g.dataset.box, rect: rect(g.querySelector("rect")), text: rect(g.querySelector("text")) })),
    arrows: [...svg.querySelectorAll("[data-arrow]")].map(g => {
      const p = g.querySelector("path");
      return { id: g.dataset.arrow, from: g.dataset.from, to: g.dataset.to, a: pt(p.getPointAtLength(0)), z: pt(p.getPointAtLength(p.getTotalLength())),
        labels: [...g.querySelectorAll("text")].map(rect) };
    }),
    headers: [...document.querySelectorAll("#board thead th")].map(th => th.textContent),
    cells: [...document.querySelectorAll('tr[data-order-id="%s"] td[data-stage]')].map(td => ({ stage: td.dataset.stage, state: td.dataset.state, text: td.textContent })),
  };
})()`

// TestPageDrawsAnyTopology: the live page, served by the API with /board answering a
// board of each of topologies (one order confirmed, one waiting for a consumer, one
// waiting for the relay), draws a box for every producer, relay and consumer and the
// broker, no two overlapping and every name inside its box; an arrow per hop from the
// right edge of its box to the left edge of the next, inside the drawing and the
// page, its labels overlapping no box and no other label; and a table whose headers
// are distinct, the confirmed order's row filled in every column.
func TestPageDrawsAnyTopology(t *testing.T) {
	browser := newBrowser(t)
	for name, topo := range topologies() {
		t.Run(name, func(t *testing.T) {
			board := topo.Board()
			done, orders := rows(board)
			board.Orders = orders
			board.At = time.Now()
			// The API serves the page; /board answers the board above instead of the
			// databases' (the audit, journeys, store and probe are left out).
			r := chi.NewRouter()
			api.New(nil, nil, nil, nil, topo, nil, slog.New(slog.NewTextHandler(io.Discard, nil))).Routes(r)
			mux := http.NewServeMux()
			mux.HandleFunc("/board", func(w http.ResponseWriter, _ *http.Request) { httpx.WriteJSON(w, http.StatusOK, board) })
			mux.Handle("/", r)
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)

			wait, cancel := context.WithTimeout(browser, 20*time.Second)
			defer cancel()
			if err := chromedp.Do(wait, chromedp.Navigate(srv.URL+"/"),
				chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-order-id=%q] td[data-stage=%q]`, done, "published"))),
				chromedp.WaitVisible(chromedp.CSS(`#flow-svg [data-arrow]`))); err != nil {
				t.Fatalf("the page never drew the board: %v", err)
			}
			g, err := chromedp.Run(wait, chromedp.Evaluate[geometry](fmt.Sprintf(measure, done)))
			if err != nil {
				t.Fatal(err)
			}
			checkFlow(t, board, g)
			checkTable(t, board, g)
			// The page as drawn, kept with go test -artifacts -outputdir DIR.
			png, err := chromedp.Run(wait, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "page.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkFlow checks the diagram of board's flow and logs its closest distances.
func checkFlow(t *testing.T, board api.Board, g geometry) {
	t.Helper()
	if g.SVG.L < 0 || g.SVG.R > g.Page.W+0.5 {
		t.Errorf("the drawing spans %.1f to %.1f px, the page 0 to %.1f", g.SVG.L, g.SVG.R, g.Page.W)
	}
	boxes := map[string]rect{}
	for _, b := range g.Boxes {
		boxes[b.Key] = b.Rect
		if !g.SVG.holds(b.Rect) || !b.Rect.holds(b.Text) {
			t.Errorf("box %s %+v, its name %+v: not inside the drawing %+v, or the name outside the box", b.Key, b.Rect, b.Text, g.SVG)
		}
	}
	want := []string{"broker"}
	arrows := 0
	for _, p := range board.Flow.Producers {
		want = append(want, "producer:"+p.Name, "relay:"+p.Name)
		arrows += 2 + len(p.Consumers)
	}
	for _, c := range board.Flow.Consumers {
		want = append(want, "consumer:"+c)
	}
	if len(boxes) != len(g.Boxes) || len(boxes) != len(want) {
		t.Errorf("boxes %v, want one each of %v", g.Boxes, want)
	}
	for _, k := range want {
		if _, ok := boxes[k]; !ok {
			t.Errorf("no box %s", k)
		}
	}
	boxGap := math.Inf(1)
	for i, a := range g.Boxes {
		for _, b := range g.Boxes[i+1:] {
			if d := a.Rect.gap(b.Rect); d <= 0 {
				t.Errorf("boxes %s %+v and %s %+v overlap", a.Key, a.Rect, b.Key, b.Rect)
			} else {
				boxGap = min(boxGap, d)
			}
		}
	}
	if len(g.Arrows) != arrows {
		t.Errorf("%d arrows, want %d", len(g.Arrows), arrows)
	}
	var labels []rect
	labelGap, margin := math.Inf(1), math.Inf(1)
	for _, a := range g.Arrows {
		from, to := boxes[a.From], boxes[a.To]
		for _, p := range []point{a.A, a.Z} {
			if !g.SVG.holdsPoint(p) || p.X < 0 || p.X > g.Page.W {
				t.Errorf("arrow %s: end %+v outside the drawing %+v or the page (%.1f px wide)", a.ID, p, g.SVG, g.Page.W)
			}
			margin = min(margin, p.X-g.SVG.L, g.SVG.R-p.X, p.Y-g.SVG.T, g.SVG.B-p.Y)
		}
		if math.Abs(a.A.X-from.R) > 1 || a.A.Y < from.T || a.A.Y > from.B || math.Abs(a.Z.X-to.L) > 1 || a.Z.Y < to.T || a.Z.Y > to.B {
			t.Errorf("arrow %s runs %+v to %+v, not from the right edge of %s %+v to the left edge of %s %+v", a.ID, a.A, a.Z, a.From, from, a.To, to)
		}
		for _, l := range a.Labels {
			if !g.SVG.holds(l) {
				t.Errorf("arrow %s: label %+v outside the drawing %+v", a.ID, l, g.SVG)
			}
			for _, b := range g.Boxes {
				if d := l.gap(b.Rect); d <= 0 {
					t.Errorf("arrow %s: label %+v overlaps box %s %+v", a.ID, l, b.Key, b.Rect)
				} else {
					labelGap = min(labelGap, d)
				}
			}
			for _, o := range labels {
				if l.gap(o) <= 0 {
					t.Errorf("arrow %s: label %+v overlaps another %+v", a.ID, l, o)
				}
			}
			labels = append(labels, l)
		}
	}
	t.Logf("%d boxes, %d arrows, %d labels in a drawing of %.0f×%.0f px: closest boxes %.1f px apart, labels %.1f px from the closest box, arrow ends %.1f px inside the drawing",
		len(g.Boxes), len(g.Arrows), len(labels), g.SVG.R-g.SVG.L, g.SVG.B-g.SVG.T, boxGap, labelGap, margin)
}

// checkTable checks the table's headers and the confirmed order's row.
func checkTable(t *testing.T, board api.Board, g geometry) {
	t.Helper()
	columns := 5 + len(board.Consumers) + 2 + len(board.AnswerConsumers)
	seen := map[string]bool{}
	for _, h := range g.Headers {
		if h == "" || seen[h] {
			t.Errorf("header %q empty or twice in %q", h, g.Headers)
		}
		seen[h] = true
	}
	if len(g.Headers) != columns || len(g.Cells) != columns-1 {
		t.Errorf("headers %q and %d cells of the order, want %d columns", g.Headers, len(g.Cells), columns)
	}
	for _, c := range g.Cells {
		if c.State != "done" || c.Text == "" {
			t.Errorf("the confirmed order's %s cell is %q %q, want done", c.Stage, c.State, c.Text)
		}
	}
	t.Logf("headers %q", g.Headers)
}

// rows returns a board's orders for board's topology, newest first: one confirmed
// (published, processed by every consumer, answered, the answer published and
// processed), one whose event waits in the first consumer's retries, one whose event
// waits for the relay; and the confirmed order's id.
func rows(board api.Board) (string, []auditor.BoardRow) {
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	at := func(ms int) *time.Time { x := t0.Add(time.Duration(ms) * time.Millisecond); return &x }
	row := func(status string) auditor.BoardRow {
		id := uuid.Must(uuid.NewV7())
		return auditor.BoardRow{OrderID: uuid.Must(uuid.NewV7()), Status: status, Version: 2, Event: contracts.EventOrderPlaced,
			EventID: &id, Draft: t0, Placed: at(5), InOutbox: at(5), Consumers: map[string]auditor.Delivery{}}
	}
	done := row("confirmed")
	done.Version, done.Published = 3, at(40)
	for i, c := range board.Consumers {
		done.Consumers[c] = auditor.Delivery{Consumer: c, State: auditor.StateProcessed, ProcessedAt: at(60 + 10*i)}
	}
	if len(board.AnswerProducers) > 0 {
		done.Answer = &auditor.AnswerLeg{Producer: board.AnswerProducers[0], Event: contracts.EventStockReservationConfirmed,
			EventID: uuid.Must(uuid.NewV7()), InOutbox: *at(100), Published: at(130), Consumers: map[string]auditor.Delivery{},
			Outcome: "confirmed", OutcomeAt: at(200)}
		for i, c := range board.AnswerConsumers {
			done.Answer.Consumers[c] = auditor.Delivery{Consumer: c, State: auditor.StateProcessed, ProcessedAt: at(150 + 10*i)}
		}
	}
	retrying := row("placed")
	retrying.Published = at(30)
	for i, c := range board.Consumers {
		d := auditor.Delivery{Consumer: c, State: auditor.StateProcessed, ProcessedAt: at(2000 + i)}
		if i == 0 {
			d = auditor.Delivery{Consumer: c, State: auditor.StateInRetry}
		}
		retrying.Consumers[c] = d
	}
	unpublished := row("placed")
	for _, c := range board.Consumers {
		unpublished.Consumers[c] = auditor.Delivery{Consumer: c, State: auditor.StateNotPublished}
	}
	return done.OrderID.String(), []auditor.BoardRow{unpublished, retrying, done}
}

// newBrowser starts a headless Chromium for the test and returns its context. The
// test fails, never skips, when Chromium is not installed (make tools installs it).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := testkit.Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI containers run as root
		chromedp.WindowSize(1440, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(testkit.Context(t), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}
