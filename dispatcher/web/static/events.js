// Event search (#/events/ID): every delivery of one event, one per endpoint,
// each with its attempts. While any delivery is still on its way the view
// keeps polling, so a retry or a replay can be watched until it lands.
import { get, post, act, loadEndpoints, endpointLink, esc, num, ms, when, ago, statusPill, result, table,
  attemptBudget } from "./api.js";

const FINAL = new Set(["delivered", "dead_letter"]);

function skeleton(eventId) {
  return `
  <section class="wide">
    <h2>Find an event</h2>
    <form id="event-search" class="inline">
      <label for="event-id">Event id</label>
      <input id="event-id" name="event_id" required maxlength="200" placeholder="evt_… or your own id" value="${esc(eventId)}">
      <button type="submit">Find</button>
    </form>
  </section>
  <section class="wide" id="event-result"${eventId ? "" : " hidden"}><h2 id="event-title" class="plain"></h2><div id="deliveries"></div></section>`;
}

function attemptRows(attempts) {
  return attempts.map((a, i) => `<tr><td>${i + 1}</td><td>${esc(when(a.at))}</td>
    <td class="wrap">${esc(result(a.status_code, a.error))}</td><td>${ms(a.response_ms)}</td></tr>`);
}

function next(d) {
  if (d.status === "delivered") return `delivered ${esc(when(d.delivered_at))}`;
  if (d.status === "dead_letter") return "gave up: dead letter";
  if (d.status === "in_flight") return "being sent now";
  return `next attempt ${esc(ago(d.next_attempt_at))}`;
}

function delivery(d, open) {
  const replay = d.status === "dead_letter"
    ? `<button type="button" class="replay" data-replay="${d.id}">Replay</button>` : "";
  const attempts = open
    ? table(["#", "when", "result", "response"], attemptRows(d.attempts), "no attempt recorded yet")
    : "";
  return `<article class="delivery" data-delivery="${d.id}" data-status="${esc(d.status)}">
    <div class="title-row"><b>${endpointLink(d.endpoint_id)}</b>${statusPill(d.status)}
      <span class="dim">attempts ${esc(attemptBudget(d))} · ${next(d)}</span>
      <span class="spacer"></span>${replay}
      <button type="button" class="toggle" data-attempts="${d.id}" aria-expanded="${open}">
        ${open ? "Hide" : "Show"} attempts (${d.attempts.length})</button></div>
    <div class="dim">last result: ${esc(result(d.last_status_code, d.last_error))}${d.last_response_ms !== null ? ` in ${ms(d.last_response_ms)}` : ""} · queued ${esc(when(d.created_at))} · delivery #${d.id}</div>
    ${attempts}
  </article>`;
}

export function render(root, eventIdRaw) {
  let eventId = "";
  try {
    eventId = eventIdRaw ? decodeURIComponent(eventIdRaw) : "";
  } catch {
    eventId = eventIdRaw; // typed into the address bar with a stray %: take it as it is
  }
  root.innerHTML = skeleton(eventId);
  const $ = sel => root.querySelector(sel);
  const open = new Set();
  let last = [];

  $("#event-search").addEventListener("submit", ev => {
    ev.preventDefault();
    const id = $("#event-id").value.trim();
    if (id) location.hash = `#/events/${encodeURIComponent(id)}`;
  });

  function draw() {
    $("#deliveries").innerHTML = last.length
      ? last.map(d => delivery(d, open.has(d.id))).join("")
      : `<p class="quiet">No deliveries for this event id: it was never enqueued, or it matched no endpoint.</p>`;
  }

  $("#deliveries").addEventListener("click", act(async ev => {
    const toggle = ev.target.closest("button[data-attempts]");
    if (toggle) {
      const id = Number(toggle.dataset.attempts);
      if (!open.delete(id)) open.add(id);
      draw();
      return;
    }
    const replay = ev.target.closest("button[data-replay]");
    if (replay) {
      replay.disabled = true;
      await post("/v1/dead-letters/replay", { ids: [Number(replay.dataset.replay)] });
      await refresh();
    }
  }));

  async function refresh() {
    if (!eventId) return;
    const [{ deliveries: rows }] = await Promise.all([get(`/v1/deliveries?event_id=${encodeURIComponent(eventId)}`), loadEndpoints()]);
    last = rows;
    const moving = rows.filter(d => !FINAL.has(d.status)).length;
    $("#event-title").textContent = `Event ${eventId}: ${rows.length} ${rows.length === 1 ? "delivery" : "deliveries"}`
      + (rows.length ? ` (${rows[0].event_type})` : "") + (moving ? `, ${moving} on the way` : "");
    draw();
  }
  // Polls only while something can still change; a finished event stays put.
  return { refresh, every: () => (last.some(d => !FINAL.has(d.status)) ? 1000 : 5000) };
}
