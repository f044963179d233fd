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

// stageCell returns the class and text of one stage of a board row; the order's
// producer's cell of the answer names the status the answer led to.
function stageCell(b, row, stage) {
  const t0 = row.draft;
  const a = row.answer;
  if (stage === "answer") return a ? ["done", answerWord(a.event) + " " + ms(t0, a.in_outbox)] : ["none", ""];
  if (stage === "answer_published") {
    if (!a) return ["none", ""];
    return a.published ? ["done", ms(t0, a.published)] : ["wait", "relay…"];
  }
  if (stage.startsWith("answer_")) {
    const c = stage.slice("answer_".length);
    return a ? deliveryCell(t0, a.consumers[c], c === b.producer ? a.outcome : "") : ["none", ""];
  }
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

// drawColumns adds one "<consumer> applied" column per consumer of the order's events,
// then, when some producer answers them, the answer leg's columns: the answer, its
// publication and one per consumer of the answers ("<consumer> applied answer" when
// that consumer has a column of the request leg already). Once, or again when the
// board's consumers change.
function drawColumns(b) {
  const answered = b.answer_producers.length ? answerStages.concat(b.answer_consumers.map(c => "answer_" + c)) : [];
  const want = orderStages.concat(b.consumers, answered);
  if (want.join() === stages.join() && document.querySelector("#board thead th[data-stage]")) return;
  stages = want;
  const head = document.querySelector("#board thead tr");
  for (const th of head.querySelectorAll("th[data-stage]")) th.remove();
  const names = { answer: b.answer_producers.join(", ") + " answered", answer_published: "answer published" };
  for (const c of b.consumers) head.append(el("th", { "data-stage": c }, c + " applied"));
  for (const s of answered) {
    const c = s.replace(/^answer_/, "");
    head.append(el("th", { "data-stage": s, class: "back" },
      names[s] || c + " applied" + (b.consumers.includes(c) ? " answer" : "")));
  }
}

function median(xs) {
  if (xs.length === 0) return null;
  const s = xs.slice().sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// legOf names the leg of producer p's events: "request" for the order's own, "answer"
// for an answer's, "other" for events that belong to no order's journey.
function legOf(b, p) {
  return p === b.producer ? "request" : b.answer_producers.includes(p) ? "answer" : "other";
}

// hops returns the arrows of the flow: for every producer, its outbox to its relay, its
// relay to the broker and the broker to each consumer of its events. An arrow of either
// leg counts over the board's rows how many events made the hop, how many wait at it,
// and the median time it took; an arrow of another producer counts nothing (n null).
function hops(b) {
  const rows = b.orders;
  const gap = (a, z) => (a && z) ? Math.max(0, new Date(z) - new Date(a)) : null;
  const out = [];
  const hop = (h, samples, waiting, sameTx) => out.push(Object.assign(h, samples === null ? { n: null, med: null } :
    { n: samples.length, waiting, sameTx, med: sameTx ? null : median(samples.filter(x => x !== null)) }));
  for (const fp of b.flow.producers) {
    const p = fp.name, leg = legOf(b, p);
    // evs are p's events on the board: the order's latest own event, or its answer
    const evs = leg === "request" ? rows.filter(r => r.in_outbox).map(r => ({ in_outbox: r.in_outbox, published: r.published, consumers: r.consumers }))
      : leg === "answer" ? rows.filter(r => r.answer && r.answer.producer === p).map(r => r.answer) : null;
    const counted = leg === "request" ? b.consumers : leg === "answer" ? b.answer_consumers : [];
    hop({ id: p + "-outbox", leg, from: "producer:" + p, to: "relay:" + p }, evs && evs.map(() => null), 0, true);
    hop({ id: p + "-relay", leg, from: "relay:" + p, to: "broker" },
      evs && evs.filter(e => e.published).map(e => gap(e.in_outbox, e.published)), evs && evs.filter(e => !e.published).length);
    for (const c of fp.consumers) {
      const h = { id: "deliver-" + p + "-" + c, leg, from: "broker", to: "consumer:" + c };
      if (!evs || !counted.includes(c)) { hop(h, null); continue; }
      const ds = evs.map(e => [e, e.consumers[c]]).filter(([, d]) => d);
      hop(h, ds.filter(([, d]) => d.state === "processed").map(([e, d]) => gap(e.published, d.processed_at)),
        ds.filter(([, d]) => d.state === "in_retry").length);
    }
  }
  let slowest = null;
  for (const h of out) if (h.med !== null && (!slowest || h.med > slowest.med)) slowest = h;
  if (slowest) slowest.slowest = true;
  for (const h of out) {
    h.first = h.n === null ? "" : h.n + (h.sameTx ? " · same tx" : h.med !== null ? " · " + (h.med < 1000 ? h.med + " ms" : (h.med / 1000).toFixed(1) + " s") : "");
    h.second = [h.waiting ? h.waiting + " waiting" : "", h.slowest ? "slowest" : ""].filter(Boolean).join(" · ");
  }
  return out;
}

// The flow's geometry, in SVG units: one lane per arrow into a box (its label above the
// line, its second line below), the space between boxes, the margin around them.
const lane = 48, boxGap = 16, pad = 10, captionH = 22, minBox = 120, minGap = 110;

// drawFlow lays out the board's flow in four columns, each computed from the flow:
// every producer with its relay beside it, the broker, every consumer, each box as
// wide as its column's longest name and each gap as wide as its longest label. Every
// arrow is a straight line between two neighbouring columns, one lane of its target
// box each, labelled with its count, its waiting events and its median time: blue
// the order's events, orange the answers, grey any other producer's.
function drawFlow(b) {
  const svg = document.getElementById("flow-svg");
  svg.replaceChildren();
  const hs = hops(b);
  // width measures text as the page styles it, in a group of class cls.
  const width = (text, cls) => {
    const g = el("svg:g", { class: cls }), t = el("svg:text", {}, text);
    g.append(t);
    svg.append(g);
    const w = t.getComputedTextLength();
    g.remove();
    return w;
  };
  const colW = names => Math.ceil(Math.max(minBox, ...names.map(n => width(n, "box") + 28)));
  const gapW = hs => Math.ceil(Math.max(minGap, ...hs.flatMap(h => [h.first, h.second].map(s => s ? width(s, "arrow" + (h.slowest ? " slowest" : "")) + 24 : 0))));
  const producers = b.flow.producers.map(p => p.name), consumers = b.flow.consumers;
  const wP = colW(producers), wR = colW(producers.map(p => p + " relay")), wB = minBox, wC = colW(consumers);
  const g1 = gapW(hs.filter(h => h.id.endsWith("-outbox"))), g2 = gapW(hs.filter(h => h.to === "broker")),
    g3 = gapW(hs.filter(h => h.from === "broker"));
  const x = { producer: pad, relay: pad + wP + g1 };
  x.broker = x.relay + wR + g2;
  x.consumer = x.broker + wB + g3;
  const W = x.consumer + wC + pad;

  const into = c => hs.filter(h => h.to === "consumer:" + c);
  const boxH = c => Math.max(1, into(c).length) * lane - 8;
  const leftH = producers.length * (lane - 8) + Math.max(0, producers.length - 1) * boxGap;
  const rightH = consumers.reduce((s, c) => s + boxH(c), 0) + Math.max(0, consumers.length - 1) * boxGap;
  const top = pad + captionH, content = Math.max(leftH, rightH, lane - 8);
  const H = top + content + pad;
  const boxes = {};
  const add = (key, name, col, y, h, w) => { boxes[key] = { name, x: x[col], y, w, h, cls: col }; };
  let y = top + (content - leftH) / 2;
  for (const p of producers) {
    add("producer:" + p, p, "producer", y, lane - 8, wP);
    add("relay:" + p, p + " relay", "relay", y, lane - 8, wR);
    y += lane - 8 + boxGap;
  }
  add("broker", "broker", "broker", top, content, wB);
  y = top + (content - rightH) / 2;
  for (const c of consumers) {
    add("consumer:" + c, c, "consumer", y, boxH(c), wC);
    y += boxH(c) + boxGap;
  }

  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.style.maxWidth = W + "px";
  const defs = el("svg:defs");
  for (const [leg, fill] of Object.entries({ request: "#3d6fd6", answer: "#c46a00", other: "#8c8c88", slow: "#b3261e" })) {
    const m = el("svg:marker", { id: "head-" + leg, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 10, markerHeight: 10,
      markerUnits: "userSpaceOnUse", orient: "auto" });
    m.append(el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill }));
    defs.append(m);
  }
  svg.append(defs);
  for (const [col, w] of [["producer", wP], ["relay", wR], ["consumer", wC]]) {
    if (Object.values(boxes).some(bx => bx.cls === col)) {
      svg.append(el("svg:text", { class: "caption", x: x[col] + w / 2, y: pad + 12 }, col + "s"));
    }
  }
  for (const [key, bx] of Object.entries(boxes)) {
    const g = el("svg:g", { class: "box " + bx.cls, "data-box": key });
    g.append(el("svg:rect", { x: bx.x, y: bx.y, width: bx.w, height: bx.h }));
    g.append(el("svg:text", { x: bx.x + bx.w / 2, y: bx.y + bx.h / 2 }, bx.name));
    svg.append(g);
  }
  const laneOf = {}; // the arrow's y at its target consumer: its lanes in the flow's order
  for (const c of consumers) {
    const bx = boxes["consumer:" + c], mine = into(c);
    mine.forEach((h, i) => { laneOf[h.id] = bx.y + bx.h / 2 + (i - (mine.length - 1) / 2) * lane; });
  }
  for (const h of hs) {
    const f = boxes[h.from], t = boxes[h.to];
    const ly = laneOf[h.id] !== undefined ? laneOf[h.id] : f.y + f.h / 2;
    const a = [f.x + f.w, ly], z = [t.x, ly];
    const g = el("svg:g", { class: `arrow ${h.leg}${h.slowest ? " slowest" : ""}`, "data-arrow": h.id, "data-from": h.from, "data-to": h.to });
    g.append(el("svg:path", { d: `M${a[0]},${a[1]} L${z[0]},${z[1]}`, "marker-end": `url(#head-${h.slowest ? "slow" : h.leg})` }));
    const mid = (a[0] + z[0]) / 2;
    if (h.first) g.append(el("svg:text", { x: mid, y: ly - 6 }, h.first));
    if (h.second) g.append(el("svg:text", { x: mid, y: ly + 16, class: "second" }, h.second));
    const label = h.n === null ? "events of no order's journey, not counted" : h.first + (h.second ? " · " + h.second : "");
    g.append(el("svg:title", {}, `${f.name} → ${t.name}: ${label}`));
    svg.append(g);
  }
  const other = hs.some(h => h.leg === "other");
  document.getElementById("flow-note").textContent =
    `Counts and median times over the ${b.orders.length} orders below; the red arrow is the slowest hop` +
    (other ? "; grey arrows carry events of no order's journey." : ".");
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
      const [cls, text] = stageCell(b, row, s);
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
