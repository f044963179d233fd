// The live page: polls /board every second and draws the latest orders, the counters
// and the audit's findings; a click on an order loads /orders/{id}/journey.
"use strict";

// The order's own stages; one column per consumer follows, named by /board.
const orderStages = ["draft", "placed", "in_outbox", "published"];
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
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// stageCell returns the class and text of one stage of a board row.
function stageCell(row, stage) {
  const t0 = row.draft;
  switch (stage) {
    case "draft": return ["done", clock(t0)];
    case "placed": return row.placed ? ["done", ms(t0, row.placed)] : ["none", row.status === "draft" ? "" : "–"];
    case "in_outbox": return row.in_outbox ? ["done", ms(t0, row.in_outbox)] : ["none", ""];
    case "published":
      if (row.published) return ["done", ms(t0, row.published)];
      return row.in_outbox ? ["wait", "relay…"] : ["none", ""];
    default: {
      const d = row.consumers && row.consumers[stage];
      if (!d) return ["none", ""];
      switch (d.state) {
        case "processed": return ["done", ms(t0, d.processed_at)];
        case "in_retry": return ["wait", "in flight / retry"];
        case "not_published": return ["none", ""];
        case "dead_lettered": return ["dead", "dead-lettered"];
        case "dropped": return ["dead", "dropped"];
        case "missing": return ["missing", "MISSING"];
      }
      return ["none", d.state];
    }
  }
}

function drawCounters(c) {
  const fmt = v => (v === null || v === undefined) ? "–" : Math.round(v).toLocaleString();
  for (const div of document.querySelectorAll(".counter")) {
    const k = div.dataset.counter;
    div.querySelector(".n").textContent = fmt(c[k]);
    if (k === "unaccounted") div.classList.toggle("alarm", c[k] > 0);
  }
  const per = c.per_consumer || {};
  const dup = Object.entries(per).map(([n, d]) => n + " " + fmt(d.duplicates_skipped)).join(", ");
  document.querySelector('[data-counter="duplicates_skipped"]').title = dup;
}

// drawColumns adds one "<consumer> applied" column per consumer the board names,
// once, or again when the consumers change.
function drawColumns(consumers) {
  const want = orderStages.concat(consumers);
  if (want.join() === stages.join() && document.querySelector("#board thead th[data-stage]")) return;
  stages = want;
  const head = document.querySelector("#board thead tr");
  for (const th of head.querySelectorAll("th[data-stage]")) th.remove();
  for (const c of consumers) head.append(el("th", { "data-stage": c }, c + " applied"));
}

function drawBoard(b) {
  drawColumns(b.consumers || []);
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
    items.push({ at: e.occurred_at, what: `${e.event_name} (v${e.order_version}) written to the outbox`, d: "event " + e.event_id + ", same transaction as the order" });
    if (e.published_at) {
      items.push({ at: e.published_at, what: "published by the relay", d: `broker confirmed; attempts ${e.attempts}` + (e.last_error ? `, last error: ${e.last_error}` : "") });
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
