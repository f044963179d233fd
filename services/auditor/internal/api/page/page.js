// The live page: polls /board every second and draws the flow of the two legs, the
// latest orders, the counters and the audit's findings; a click on an order loads
// /orders/{id}/journey.
"use strict";

// The order's own stages; one column per consumer follows, named by /board, then the
// answer leg: the answer in its producer's outbox, published, one column per consumer
// of the answer (data-stage "answer_<consumer>").
const orderStages = ["draft", "placed", "in_outbox", "published"];
const answerStages = ["answer", "answer_published"];
let stages = orderStages;
let selected = null;

function shortID(id) { return id ? id.slice(-8) : ""; }

function ms(from, to) {
  const d = new Date(to) - new Date(from);
  if (d < 1000) return "+" + d + " ms";
  return "+" + (d / 1000).toFixed(1) + " s";
}

function clock(t) {
  return new Date(t).toLocaleTimeString([], { hour12: false }) + "." + String(new Date(t).getMilliseconds()).padStart(3, "0");
}

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// deliveryCell returns the class and text of a consumer's delivery d of an event.
function deliveryCell(t0, d, done) {
  if (!d) return ["none", ""];
  switch (d.state) {
    case "processed": return ["done", (done ? done + " " : "") + ms(t0, d.processed_at)];
    case "in_retry": return ["wait", "in flight / retry"];
    case "not_published": return ["none", ""];
    case "dead_lettered": return ["dead", "dead-lettered"];
    case "dropped": return ["dead", "dropped"];
    case "missing": return ["missing", "MISSING"];
  }
  return ["none", d.state];
}

// answerWord names an answer by the last word of its event name before the version:
// stock.reservation.confirmed.v1 -> confirmed.
function answerWord(event) { const p = event.split("."); return p[p.length - 2]; }

// stageCell returns the class and text of one stage of a board row.
function stageCell(row, stage) {
  const t0 = row.draft;
  const a = row.answer;
  if (stage === "answer") return a ? ["done", answerWord(a.event) + " " + ms(t0, a.in_outbox)] : ["none", ""];
  if (stage === "answer_published") {
    if (!a) return ["none", ""];
    return a.published ? ["done", ms(t0, a.published)] : ["wait", "relay…"];
  }
  if (stage.startsWith("answer_")) return a ? deliveryCell(t0, a.consumers[stage.slice(7)], a.outcome) : ["none", ""];
  switch (stage) {
    case "draft": return ["done", clock(t0)];
    case "placed": return row.placed ? ["done", ms(t0, row.placed)] : ["none", row.status === "draft" ? "" : "–"];
    case "in_outbox": return row.in_outbox ? ["done", ms(t0, row.in_outbox)] : ["none", ""];
    case "published":
      if (row.published) return ["done", ms(t0, row.published)];
      return row.in_outbox ? ["wait", "relay…"] : ["none", ""];
    default: return deliveryCell(t0, row.consumers && row.consumers[stage]);
  }
}

function drawCounters(c) {
  const fmt = v => (v === null || v === undefined) ? "–" : Math.round(v).toLocaleString();
  for (const div of document.querySelectorAll(".counter")) {
    const k = div.dataset.counter;
    div.querySelector(".n").textContent = fmt(c[k]);
    if (k === "unaccounted" || k === "unanswered") div.classList.toggle("alarm", c[k] > 0);
  }
  const per = c.per_consumer || {};
  const dup = Object.entries(per).map(([n, d]) => n + " " + fmt(d.duplicates_skipped)).join(", ");
  document.querySelector('[data-counter="duplicates_skipped"]').title = dup;
}

// drawColumns adds one "<consumer> applied" column per consumer the board names, then
// the answer leg's columns, once, or again when the consumers change.
function drawColumns(b) {
  const answered = (b.answer_consumers || []).map(c => "answer_" + c);
  const want = orderStages.concat(b.consumers || [], answerStages, answered);
  if (want.join() === stages.join() && document.querySelector("#board thead th[data-stage]")) return;
  stages = want;
  const head = document.querySelector("#board thead tr");
  for (const th of head.querySelectorAll("th[data-stage]")) th.remove();
  const names = { answer: (b.answer_producers || []).join(", ") + " answered", answer_published: "answer published" };
  for (const s of want.slice(orderStages.length)) {
    head.append(el("th", { "data-stage": s, class: answerStages.includes(s) || answered.includes(s) ? "back" : "" },
      names[s] || s.replace(/^answer_/, "") + " applied"));
  }
}

function median(xs) {
  if (xs.length === 0) return null;
  const s = xs.slice().sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// hops returns the arrows of the flow with their counts over the board's rows: how
// many events made the hop, how many wait at it, and the median time it took.
function hops(b) {
  const rows = b.orders, p = b.producer;
  const hop = (id, leg, from, to, samples, waiting, sameTx) => ({ id, leg, from, to, n: samples.length, waiting, sameTx,
    med: sameTx ? null : median(samples.filter(x => x !== null)) });
  const gap = (a, z) => (a && z) ? Math.max(0, new Date(z) - new Date(a)) : null;
  const out = [
    hop(p + "-outbox", "request", p, p + " relay", rows.filter(r => r.in_outbox).map(() => null), 0, true),
    hop(p + "-relay", "request", p + " relay", "broker", rows.filter(r => r.published).map(r => gap(r.in_outbox, r.published)),
      rows.filter(r => r.in_outbox && !r.published).length),
  ];
  for (const c of b.consumers) {
    const ds = rows.map(r => [r, r.consumers[c]]).filter(([, d]) => d);
    out.push(hop("deliver-" + c, "request", "broker", c,
      ds.filter(([, d]) => d.state === "processed").map(([r, d]) => gap(r.published, d.processed_at)),
      ds.filter(([, d]) => d.state === "in_retry").length));
  }
  const as = rows.filter(r => r.answer).map(r => [r, r.answer]);
  for (const ap of b.answer_producers) {
    const mine = as.filter(([, a]) => a.producer === ap);
    out.push(hop(ap + "-outbox", "answer", ap, ap + " relay", mine.map(() => null), 0, true));
    out.push(hop(ap + "-relay", "answer", ap + " relay", "broker",
      mine.filter(([, a]) => a.published).map(([, a]) => gap(a.in_outbox, a.published)), mine.filter(([, a]) => !a.published).length));
  }
  for (const c of b.answer_consumers) {
    const ds = as.map(([, a]) => [a, a.consumers[c]]).filter(([, d]) => d);
    out.push(hop("deliver-answer-" + c, "answer", "broker", c,
      ds.filter(([, d]) => d.state === "processed").map(([a, d]) => gap(a.published, d.processed_at)),
      ds.filter(([, d]) => d.state === "in_retry").length));
  }
  let slowest = null;
  for (const h of out) if (h.med !== null && (!slowest || h.med > slowest.med)) slowest = h;
  if (slowest) slowest.slowest = true;
  return out;
}

// drawFlow draws the services, their relays and the broker as boxes and each hop as an
// arrow labelled with its count, its waiting events and its median time: the request
// leg from the order's producer along the top, the answer leg back along the bottom.
function drawFlow(b) {
  const W = 120, H = 40, colX = [10, 230, 460, 690, 910];
  const right = b.consumers.filter(c => !b.answer_producers.includes(c)).concat(b.consumers.filter(c => b.answer_producers.includes(c)));
  const rowY = i => 10 + i * 60;
  const laneA = rowY(right.length - 1) + H / 2 + 0.5;
  const laneB = rowY(right.length) + 40 + H / 2;
  const height = laneB + H / 2 + 10;
  const boxes = {};
  boxes[b.producer] = { x: colX[0], y: laneA - H / 2, h: laneB + H / 2 - (laneA - H / 2) };
  boxes[b.producer + " relay"] = { x: colX[1], y: laneA - H / 2, h: H };
  boxes.broker = { x: colX[2], y: 10, h: height - 20, cls: "broker" };
  right.forEach((c, i) => { boxes[c] = { x: colX[4], y: rowY(i), h: H }; });
  b.answer_producers.forEach((p, i) => {
    if (!boxes[p]) boxes[p] = { x: colX[4], y: laneB - H / 2 + i * 60, h: H };
    boxes[p + " relay"] = { x: colX[3], y: laneB - H / 2 + i * 60, h: H };
  });
  const svg = document.getElementById("flow-svg");
  svg.setAttribute("viewBox", `0 0 ${colX[4] + W + 10} ${height + 10 * b.answer_producers.length}`);
  svg.replaceChildren();
  const defs = el("svg:defs");
  for (const leg of ["request", "answer", "slow"]) {
    const m = el("svg:marker", { id: "head-" + leg, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 10, markerHeight: 10,
      markerUnits: "userSpaceOnUse", orient: "auto" });
    m.append(el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: { request: "#3d6fd6", answer: "#c46a00", slow: "#b3261e" }[leg] }));
    defs.append(m);
  }
  svg.append(defs);
  for (const [name, bx] of Object.entries(boxes)) {
    const g = el("svg:g", { class: "box " + (bx.cls || ""), "data-box": name });
    g.append(el("svg:rect", { x: bx.x, y: bx.y, width: W, height: bx.h }));
    g.append(el("svg:text", { x: bx.x + W / 2, y: bx.y + bx.h / 2 }, name));
    svg.append(g);
  }
  const ends = h => {
    const f = boxes[h.from], t = boxes[h.to];
    if (h.leg === "request") {
      const y = h.to === "broker" || h.from === b.producer ? laneA : t.y + H / 2;
      return [[f.x + W, y], [t.x, y]];
    }
    if (h.from === "broker") return [[f.x, laneB], [t.x + W, laneB]];
    if (h.to === "broker") return [[f.x, f.y + H / 2], [t.x + W, f.y + H / 2]];
    // the answer leaves its producer's box for its relay, down to the lower lane
    const ty = t.y + H / 2;
    return f.y + H < ty ? [[f.x + W / 2, f.y + f.h], [f.x + W / 2, ty], [t.x + W, ty]] : [[f.x, ty], [t.x + W, ty]];
  };
  for (const h of hops(b)) {
    const pts = ends(h);
    const g = el("svg:g", { class: `arrow ${h.leg}${h.slowest ? " slowest" : ""}`, "data-arrow": h.id });
    g.append(el("svg:path", { d: "M" + pts.map(p => p.join(",")).join(" L"), "marker-end": `url(#head-${h.slowest ? "slow" : h.leg})` }));
    const [a, z] = pts.slice(-2);
    const first = h.n + (h.sameTx ? " · same tx" : h.med !== null ? " · " + (h.med < 1000 ? h.med + " ms" : (h.med / 1000).toFixed(1) + " s") : "");
    const second = [h.waiting ? h.waiting + " waiting" : "", h.slowest ? "slowest" : ""].filter(Boolean).join(" · ");
    const label = first + (second ? " · " + second : "");
    const x = (a[0] + z[0]) / 2, y = Math.min(a[1], z[1]);
    g.append(el("svg:text", { x, y: y - 6 }, first));
    if (second) g.append(el("svg:text", { x, y: y + 16, class: "second" }, second));
    g.append(el("svg:title", {}, `${h.from} → ${h.to}: ${label}`));
    svg.append(g);
  }
  document.getElementById("flow-note").textContent =
    `Counts and median times over the ${b.orders.length} orders below; the red arrow is the slowest hop.`;
}

function drawBoard(b) {
  drawColumns(b);
  drawFlow(b);
  const body = document.querySelector("#board tbody");
  body.replaceChildren();
  for (const row of b.orders) {
    const tr = el("tr", { "data-order-id": row.order_id });
    if (row.order_id === selected) tr.classList.add("selected");
    const id = el("td", { class: "id" }, shortID(row.order_id));
    id.append(el("span", { class: "st" }, row.status + " v" + row.version));
    tr.append(id);
    for (const s of stages) {
      const [cls, text] = stageCell(row, s);
      tr.append(el("td", { class: "stage " + cls, "data-stage": s, "data-state": cls }, text));
    }
    tr.addEventListener("click", () => openJourney(row.order_id));
    body.append(tr);
  }
  document.getElementById("loading").hidden = true;
  document.getElementById("empty").hidden = b.orders.length > 0;
  drawCounters(b.counters);
  const f = document.getElementById("findings");
  const list = f.querySelector("ul");
  list.replaceChildren();
  for (const e of b.audit.events || []) {
    const li = el("li", { "data-event-id": e.event_id },
      `${e.event_name} ${e.event_id} (order ${shortID(e.order_id)}): missing in ${e.consumers.join(", ")}`);
    li.addEventListener("click", () => openJourney(e.order_id));
    list.append(li);
  }
  f.hidden = (b.audit.events || []).length === 0;
  const u = document.getElementById("unanswered");
  const ul = u.querySelector("ul");
  ul.replaceChildren();
  for (const w of b.audit.unanswered_orders || []) {
    const why = w.answer ? `${w.answer.producer} answered ${answerWord(w.answer.event_name)} (${w.answer.event_id}), not applied`
      : "no answer written";
    const gone = w.event_id ? "" : " (its placed event is no longer in the outbox)";
    const li = el("li", { "data-order-id": w.order_id }, `order ${w.order_id} placed v${w.version}${gone}: ${why}`);
    li.addEventListener("click", () => openJourney(w.order_id));
    ul.append(li);
  }
  u.hidden = (b.audit.unanswered_orders || []).length === 0;
  const c = document.getElementById("contradicted");
  const cl = c.querySelector("ul");
  cl.replaceChildren();
  for (const x of b.audit.contradicted_orders || []) {
    const li = el("li", { "data-order-id": x.order_id },
      `order ${x.order_id}: ${x.producer} answered ${x.answer_status} (${x.event_id}), the order is ${x.order_status} v${x.order_version}`);
    li.addEventListener("click", () => openJourney(x.order_id));
    cl.append(li);
  }
  c.hidden = (b.audit.contradicted_orders || []).length === 0;
  const k = document.getElementById("unknown-dead");
  const kl = k.querySelector("ul");
  kl.replaceChildren();
  for (const d of b.audit.unknown_dead_letters || []) {
    kl.append(el("li", { "data-message-key": d.message_key },
      `${d.consumer}: ${d.event_name || "message"} ${d.message_key}, dead-lettered at ${d.dead_lettered_at} (${d.reason})`));
  }
  k.hidden = (b.audit.unknown_dead_letters || []).length === 0;
  const a = b.audit;
  document.getElementById("audit-line").textContent =
    `audit: ${a.audited.toLocaleString()} published events checked in ${a.cycles} cycles, lag ${a.lag_seconds.toFixed(1)} s, ` +
    `grace ${b.grace_seconds} s` + (a.last_error ? ` — last cycle failed: ${a.last_error}` : "");
}

function stateText(d) {
  switch (d.state) {
    case "processed": return [`${d.consumer}: processed, key in processed_event`, ""];
    case "in_retry": return [`${d.consumer}: not processed yet`, "wait"];
    case "not_published": return [`${d.consumer}: waits for the relay`, "wait"];
    case "dead_lettered": return [`${d.consumer}: dead-lettered (${d.dead_letter.reason})`, "dead"];
    case "dropped": return [`${d.consumer}: dead-lettered, then dropped (${d.dead_letter.reason})`, "dead"];
    case "missing": return [`${d.consumer}: MISSING — neither processed nor dead-lettered`, "missing"];
  }
  return [d.consumer + ": " + d.state, ""];
}

function drawJourney(j) {
  document.getElementById("journey-head").textContent = `order ${j.order.id} — ${j.order.status} v${j.order.version}`;
  const items = [{ at: j.order.created_at, what: "order created: draft v1", d: "orders row written by POST /orders" }];
  for (const e of j.events) {
    const own = j.transitions.some(t => t.event_id === e.event_id); // an event of the order's own change
    items.push({ at: e.occurred_at, what: `${e.event_name} (v${e.order_version}) written to the outbox (${e.producer})`,
      d: "event " + e.event_id + (own ? ", same transaction as the order" : ", same transaction as " + e.producer + "'s answer") });
    if (e.published_at) {
      items.push({ at: e.published_at, what: `published by the relay (${e.producer})`, d: `broker confirmed; attempts ${e.attempts}` + (e.last_error ? `, last error: ${e.last_error}` : "") });
    } else {
      items.push({ at: null, what: "waiting for the relay", cls: "wait", d: e.last_error ? "last error: " + e.last_error : "" });
    }
    for (const d of e.deliveries || []) {
      const [what, cls] = stateText(d);
      items.push({ at: d.processed_at || (d.dead_letter && d.dead_letter.dead_lettered_at) || null, what, cls, d: e.event_name });
    }
  }
  items.sort((a, b) => (a.at === null) - (b.at === null) || new Date(a.at) - new Date(b.at));
  const ol = document.getElementById("timeline");
  ol.replaceChildren();
  for (const it of items) {
    const li = el("li", { class: it.cls || "" });
    li.append(el("span", { class: "t" }, it.at ? clock(it.at) + "  " + ms(j.order.created_at, it.at) : "—"));
    li.append(el("span", { class: "what" }, it.what));
    if (it.d) li.append(el("span", { class: "d" }, it.d));
    ol.append(li);
  }
  const ul = document.getElementById("copies");
  ul.replaceChildren();
  for (const c of j.state_copies) {
    ul.append(el("li", {}, c.found ? `${c.consumer}: order_status ${c.status} v${c.version}${c.effect ? ", " + c.effect : ""}` : `${c.consumer}: no copy yet`));
  }
  document.getElementById("journey").hidden = false;
}

async function openJourney(id) {
  selected = id;
  history.replaceState(null, "", "#order=" + id);
  for (const tr of document.querySelectorAll("#board tbody tr")) tr.classList.toggle("selected", tr.dataset.orderId === id);
  await refreshJourney();
}

async function refreshJourney() {
  if (!selected) return;
  const r = await fetch("/orders/" + selected + "/journey");
  if (r.ok) drawJourney(await r.json());
}

document.getElementById("close").addEventListener("click", () => {
  selected = null;
  history.replaceState(null, "", location.pathname);
  document.getElementById("journey").hidden = true;
});

async function tick() {
  try {
    const r = await fetch("/board");
    if (!r.ok) throw new Error("GET /board: " + r.status);
    drawBoard(await r.json());
    await refreshJourney();
    document.getElementById("status").textContent = "updated " + new Date().toLocaleTimeString([], { hour12: false });
  } catch (e) {
    document.getElementById("status").textContent = "not updated: " + e.message;
  } finally {
    setTimeout(tick, 1000);
  }
}
// A link to /#order=<id> opens that order's journey.
if (location.hash.startsWith("#order=")) selected = location.hash.slice("#order=".length);
tick();
