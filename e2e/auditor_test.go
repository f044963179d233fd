package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"example.com/shop/contracts"
	"example.com/shop/testkit"
)

// auditorEnv makes the auditor quick: a cycle every 200 ms, events settled after 2 s.
func auditorEnv() map[string][]string {
	return map[string][]string{"auditor": {"AUDIT_INTERVAL=200ms", "AUDIT_GRACE=2s", "AUDIT_WINDOW=10m"}}
}

// newBrowser starts a headless Chromium for the test and returns its context. The
// test fails, never skips, when Chromium is not installed (make test installs the
// Debian package chromium when it runs as root, and otherwise names the command).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := testkit.Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI containers run as root
		chromedp.WindowSize(1440, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(testkit.Context(t), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// screenshot saves the whole page as PNG (quality 100; below it is JPEG) under the test's artifact directory (kept with
// go test -artifacts -outputdir DIR).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	file := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)
}

// cell selects the stage cell of an order's row on the live page.
func cell(orderID, stage, state string) string {
	return fmt.Sprintf(`tr[data-order-id=%q] td[data-stage=%q][data-state=%q]`, orderID, stage, state)
}

func TestLivePageShowsAnOrderAppliedByStockAndShipping(t *testing.T) {
	s := newShop(t, options{auditor: true, env: auditorEnv()})
	ctx := testkit.Context(t)
	browser := newBrowser(t)
	if err := chromedp.Do(browser, chromedp.Navigate("http://"+s.sys.Auditor.Addr+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#empty`))); err != nil {
		t.Fatalf("open the page: %v", err)
	}

	o := s.createOrder(ctx, 2)
	s.place(ctx, o.ID, 200)

	wait, cancel := context.WithTimeout(browser, settle)
	defer cancel()
	if err := chromedp.Do(wait,
		chromedp.WaitVisible(chromedp.CSS(cell(o.ID, "published", "done"))),
		chromedp.WaitVisible(chromedp.CSS(cell(o.ID, "stock", "done"))),
		chromedp.WaitVisible(chromedp.CSS(cell(o.ID, "shipping", "done"))),
		chromedp.WaitVisible(chromedp.CSS(cell(o.ID, "answer_order", "done"))),
	); err != nil {
		html, _ := chromedp.Run(browser, chromedp.OuterHTML(chromedp.CSS("#board")))
		t.Fatalf("the page never showed order %s applied by stock and shipping, and stock's answer by order: %v\n%s", o.ID, err, html)
	}
	checkLayout(t, browser, o.ID)
	if err := chromedp.Do(wait,
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-order-id=%q]`, o.ID))),
		chromedp.WaitVisible(chromedp.CSS(`#journey #timeline li`)),
	); err != nil {
		t.Fatalf("the journey of order %s never opened: %v", o.ID, err)
	}
	timeline, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`#timeline`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"written to the outbox", "published by the relay", "stock: processed", "shipping: processed"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("journey timeline lacks %q:\n%s", want, timeline)
		}
	}
	screenshot(t, browser, "auditor-page.png")
}

// layoutProblems lists what is wrong with the live page showing order %s that went
// through: boxes of the flow that overlap, an arrow end or label outside the drawing
// or the page, a label over a box, a table header empty or twice, a cell of the
// order's row not done; and the smallest distance between two boxes.
const layoutProblems = `(() => {
  const svg = document.getElementById("flow-svg"), m = svg.getScreenCTM(), s = svg.getBoundingClientRect();
  const pageW = document.documentElement.clientWidth, out = [];
  const gap = (a, b) => Math.max(b.left - a.right, a.left - b.right, b.top - a.bottom, a.top - b.bottom);
  const inside = (r, o) => r.left >= o.left - 0.5 && r.right <= o.right + 0.5 && r.top >= o.top - 0.5 && r.bottom <= o.bottom + 0.5;
  const boxes = [...svg.querySelectorAll("[data-box]")].map(g => [g.dataset.box, g.querySelector("rect").getBoundingClientRect()]);
  let minGap = Infinity;
  boxes.forEach(([k, r], i) => boxes.slice(i + 1).forEach(([k2, r2]) => {
    const d = gap(r, r2);
    if (d <= 0) out.push("boxes " + k + " and " + k2 + " overlap");
    minGap = Math.min(minGap, d);
  }));
  for (const g of svg.querySelectorAll("[data-arrow]")) {
    const p = g.querySelector("path");
    for (const at of [0, p.getTotalLength()]) {
      const q = p.getPointAtLength(at).matrixTransform(m);
      if (q.x < s.left - 0.5 || q.x > s.right + 0.5 || q.y < s.top - 0.5 || q.y > s.bottom + 0.5 || q.x < 0 || q.x > pageW)
        out.push("arrow " + g.dataset.arrow + " ends outside the drawing or the page at " + q.x + "," + q.y);
    }
    for (const t of g.querySelectorAll("text")) {
      const r = t.getBoundingClientRect();
      if (!inside(r, s)) out.push("label " + t.textContent + " outside the drawing");
      for (const [k, b] of boxes) if (gap(r, b) <= 0) out.push("label " + t.textContent + " over box " + k);
    }
  }
  if (s.right > pageW + 0.5) out.push("the drawing runs off the page");
  const heads = [...document.querySelectorAll("#board thead th")].map(th => th.textContent);
  heads.forEach((h, i) => { if (!h || heads.indexOf(h) !== i) out.push("header " + JSON.stringify(h) + " empty or twice"); });
  const cells = [...document.querySelectorAll('tr[data-order-id="%s"] td[data-stage]')];
  if (cells.length !== heads.length - 1) out.push(cells.length + " cells for " + heads.length + " headers");
  for (const td of cells) if (td.dataset.state !== "done" || !td.textContent) out.push("cell " + td.dataset.stage + " not done");
  return { problems: out, minGap, boxes: boxes.length, headers: heads };
})()`

// checkLayout fails t with the layout problems of the live page showing order id.
func checkLayout(t *testing.T, browser context.Context, id string) {
	t.Helper()
	type layout struct {
		Problems []string
		MinGap   float64
		Boxes    int
		Headers  []string
	}
	l, err := chromedp.Run(browser, chromedp.Evaluate[layout](fmt.Sprintf(layoutProblems, id)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Problems {
		t.Error(p)
	}
	t.Logf("%d boxes, the closest %.1f px apart; headers %q", l.Boxes, l.MinGap, l.Headers)
}

func TestAuditorFindsAKeyDeletedByHand(t *testing.T) {
	s := newShop(t, options{auditor: true, env: auditorEnv()})
	ctx := testkit.Context(t)
	o := s.createOrder(ctx, 1)
	s.place(ctx, o.ID, 200)
	var eventID string
	if err := s.dbs.Order.QueryRow(ctx, `SELECT id::text FROM outbox WHERE envelope->'payload'->>'order_id' = $1 AND event_name = $2`,
		o.ID, contracts.EventOrderPlaced).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	// Wait until the audit has checked the event and found it everywhere.
	eventually(t, "the audit checks the event", func() string {
		r, err := s.api.Audit(ctx)
		if err != nil {
			return err.Error()
		}
		if r.Audited < 1 || r.UnaccountedTotal != 0 {
			return fmt.Sprintf("%+v", r)
		}
		return ""
	})
	// An operator deletes stock's key by hand: the reservation stays, the proof is gone.
	tag, err := s.dbs.Stock.Exec(ctx, `DELETE FROM processed_event WHERE consumer = 'stock' AND message_key = $1`, eventID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("delete the key: %v (%d rows)", err, tag.RowsAffected())
	}

	eventually(t, "the audit reports the gap", func() string {
		r, err := s.api.Audit(ctx)
		if err != nil {
			return err.Error()
		}
		if r.Unaccounted["stock"] != 1 || r.Unaccounted["shipping"] != 0 || len(r.Events) != 1 || r.Events[0].EventID != eventID {
			return fmt.Sprintf("%+v", r)
		}
		return ""
	})
	if v, err := s.sys.Auditor.Metric(ctx, "delivery_unaccounted_events", map[string]string{"consumer": "stock"}); err != nil || v != 1 {
		t.Fatalf(`delivery_unaccounted_events{consumer="stock"} = %v (%v), want 1`, v, err)
	}
	if v, err := s.sys.Auditor.Metric(ctx, "delivery_unaccounted_events", map[string]string{"consumer": "shipping"}); err != nil || v != 0 {
		t.Fatalf(`delivery_unaccounted_events{consumer="shipping"} = %v (%v), want 0`, v, err)
	}

	browser := newBrowser(t)
	wait, cancel := context.WithTimeout(browser, settle)
	defer cancel()
	if err := chromedp.Do(wait, chromedp.Navigate("http://"+s.sys.Auditor.Addr+"/"),
		chromedp.WaitVisible(chromedp.CSS(cell(o.ID, "stock", "missing"))),
		chromedp.WaitVisible(chromedp.CSS(cell(o.ID, "shipping", "done"))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#findings li[data-event-id=%q]`, eventID))),
		chromedp.WaitVisible(chromedp.CSS(`.counter.alarm[data-counter="unaccounted"]`)),
	); err != nil {
		t.Fatalf("the page does not show the gap: %v", err)
	}
	var counter string
	counter, err = chromedp.Run(browser, chromedp.Text(chromedp.CSS(`[data-counter="unaccounted"] .n`)))
	if err != nil {
		t.Fatal(err)
	}
	if counter != "1" {
		t.Fatalf("unaccounted counter %q, want 1", counter)
	}
	screenshot(t, browser, "auditor-gap.png")

	// The auditor runs as the role auditor: it can see the gap but neither mend
	// nor widen it. Its sessions are read-only (25006); a session that turns that
	// off still lacks the privilege (42501).
	auditor, err := pgx.Connect(ctx, testkit.URLAs(t, s.dbs.Stock.Config().ConnConfig.ConnString(), "auditor"))
	if err != nil {
		t.Fatal(err)
	}
	defer auditor.Close(context.Background())
	writes := []string{
		`INSERT INTO processed_event (consumer, message_key) VALUES ('stock', $1)`,
		`UPDATE processed_event SET processed_at = now() WHERE message_key <> $1`,
		`DELETE FROM processed_event WHERE message_key <> $1`,
	}
	refused := func(code string) {
		t.Helper()
		for _, sql := range writes {
			_, err := auditor.Exec(ctx, sql, eventID)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != code {
				t.Errorf("auditor: %s: err = %v, want SQLSTATE %s", sql, err, code)
			}
		}
	}
	refused("25006") // read_only_sql_transaction
	if _, err := auditor.Exec(ctx, `SET default_transaction_read_only = off`); err != nil {
		t.Fatal(err)
	}
	refused("42501") // insufficient_privilege

	// Restored (a replay would do it): the audit clears the finding.
	if _, err := s.dbs.Stock.Exec(ctx, `INSERT INTO processed_event (consumer, message_key) VALUES ('stock', $1)`, eventID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the gap is cleared", func() string {
		r, err := s.api.Audit(ctx)
		if err != nil || r.UnaccountedTotal != 0 {
			return fmt.Sprintf("%+v %v", r, err)
		}
		return ""
	})

}
