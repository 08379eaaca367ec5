// One delivery (#/delivery/ID): what was sent (the payload, exactly as
// enqueued), to which endpoint, each attempt's result, and a replay when
// it gave up. The payload is shown to the operator only, never logged.
import { get, post, act, loadEndpoints, endpointLink, esc, num, ms, when, ago, statusPill, result, table,
  attemptBudget, earlierAttempts, timingParts } from "./api.js";

function skeleton(id) {
  return `
  <section class="wide">
    <div class="title-row"><h2 id="dl-title">Delivery #${id}</h2><span id="dl-status"></span><span class="spacer"></span>
      <button type="button" id="dl-replay" hidden>Replay</button></div>
    <dl class="settings" id="dl-facts"></dl>
    <p id="dl-message" class="note" role="status" hidden></p>
  </section>
  <section class="wide"><h2>Attempts</h2><div id="dl-attempts"></div><div id="dl-details"></div></section>
  <section class="wide"><h2>Payload</h2><pre id="dl-payload" class="payload"></pre></section>`;
}

export function render(root, idText) {
  const id = Number(idText);
  root.innerHTML = skeleton(id);
  const $ = sel => root.querySelector(sel);
  let last = null;

  $("#dl-replay").addEventListener("click", act(async () => {
    $("#dl-replay").disabled = true;
    const done = await post("/v1/dead-letters/replay", { ids: [id] });
    $("#dl-message").textContent = done.requeued ? "Requeued: it is sent again from now." : "Nothing requeued.";
    $("#dl-message").hidden = false;
    $("#dl-replay").disabled = false;
    await refresh();
  }));

  async function refresh() {
    const [, d] = await Promise.all([loadEndpoints(), get(`/v1/deliveries/${id}`)]);
    last = d;
    $("#dl-title").textContent = `Delivery #${d.id}: ${d.event_type}`;
    $("#dl-status").innerHTML = statusPill(d.status);
    $("#dl-replay").hidden = d.status !== "dead_letter";
    const facts = [
      ["endpoint", endpointLink(d.endpoint_id)], ["application", esc(d.app)],
      ["event", `<a href="#/events/${encodeURIComponent(d.event_id)}">${esc(d.event_id)}</a>`],
      ["created", esc(when(d.created_at))],
      ["attempts", esc(attemptBudget(d))],
      ["last result", esc(result(d.last_status_code, d.last_error)) + (d.last_response_ms !== null ? ` in ${ms(d.last_response_ms)}` : "")],
      d.delivered_at ? ["delivered", esc(when(d.delivered_at))]
        : ["next attempt", d.status === "dead_letter" ? "none: dead letter" : esc(ago(d.next_attempt_at))],
    ];
    $("#dl-facts").innerHTML = facts.map(([k, v]) => `<div><dt>${esc(k)}</dt><dd>${v}</dd></div>`).join("");
    const rows = d.attempts.map((a, i) =>
      `<tr><td>${i + 1}</td><td>${esc(when(a.at))}</td><td class="wrap">${esc(result(a.status_code, a.error))}</td><td>${ms(a.response_ms)}</td></tr>`);
    // Where the replay's fresh budget starts: the attempts above it stay.
    const earlier = earlierAttempts(d);
    if (earlier) rows.splice(earlier, 0, `<tr class="replayed"><td colspan="4" class="dim">replayed: a fresh budget of ${num(d.max_attempts)} attempts from here</td></tr>`);
    $("#dl-attempts").innerHTML = table(["#", "when", "result", "response"], rows, "no attempt recorded yet");
    $("#dl-details").innerHTML = d.attempts.map((a, i) => details(i + 1, a)).join("");
    sizeBars($("#dl-details"));
    $("#dl-payload").textContent = JSON.stringify(d.payload, null, 2);
  }
  return { refresh, every: () => (last && ["delivered", "dead_letter"].includes(last.status) ? 10000 : 1500) };
}

function timingBar(t) {
  const parts = timingParts(t);
  if (!parts.length) return "";
  const said = parts.map(([, , what]) => what).join(" · ");
  const segments = parts.map(([cls, width, what]) => `<span class="${cls}" data-w="${width}" title="${esc(what)}"></span>`).join("");
  return `<div class="timing" role="img" aria-label="${esc(said)}">${segments}</div><p class="dim">${esc(said)} · total ${ms(t.total)}</p>`;
}

// Widths set through the CSSOM: the pages' CSP allows no inline style.
function sizeBars(root) {
  for (const s of root.querySelectorAll(".timing span[data-w]")) s.style.width = `${s.dataset.w}%`;
}

function details(n, a) {
  const facts = [a.remote_addr ? `from ${a.remote_addr}` : "no connection", a.request_url ? `fired ${a.request_url}` : ""]
    .filter(Boolean).map(esc).join(" · ");
  const headers = a.response_headers
    ? `<dl class="headers">${Object.entries(a.response_headers).map(([k, v]) => `<div><dt>${esc(k)}</dt><dd>${esc(v)}</dd></div>`).join("")}</dl>` : "";
  const body = a.response_excerpt ? `<pre class="excerpt">${esc(a.response_excerpt)}</pre>` : "";
  return `<div class="attempt-detail"><h3>Attempt ${n}: ${esc(result(a.status_code, a.error))}</h3>
    ${timingBar(a.timings_ms)}<p>${facts}</p>${headers}${body}</div>`;
}
