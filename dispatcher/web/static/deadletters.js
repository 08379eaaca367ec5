// Dead letters (#/dead-letters, ?endpoint=ID to narrow): the newest ones,
// each replayable, and the replay of one endpoint's since a time, for when
// a receiver is back after an outage. A replay gives a fresh attempt budget.
import { get, post, act, loadEndpoints, endpointLink, endpointOptions, esc, num, when, result, table } from "./api.js";

function skeleton() {
  return `
  <section class="wide">
    <h2>Dead letters</h2>
    <form id="dl-filter" class="inline">
      <label for="dl-endpoint">Endpoint</label><select id="dl-endpoint"></select>
    </form>
    <p id="dl-message" class="note" role="status" hidden></p>
    <div id="dl-list"></div>
  </section>
  <section class="wide">
    <h2>Replay an endpoint's dead letters</h2>
    <form id="dl-bulk" class="inline">
      <label for="bulk-endpoint">Endpoint</label><select id="bulk-endpoint" required></select>
      <label for="bulk-since">dead since</label><input id="bulk-since" type="datetime-local" step="1">
      <button type="submit">Replay</button>
    </form>
    <p class="dim">Without a time, every dead letter of the endpoint (the oldest 10,000 per replay).</p>
  </section>`;
}

function row(d) {
  return `<tr data-dead-letter="${d.id}"><td>${esc(when(d.dead_at))}</td><td>${endpointLink(d.endpoint_id)}</td>
    <td><a href="#/events/${encodeURIComponent(d.event_id)}">${esc(d.event_id)}</a></td><td>${esc(d.event_type)}</td>
    <td>${num(d.attempt_count)}</td><td class="wrap">${esc(result(d.last_status_code, d.last_error))}</td>
    <td><button type="button" data-replay="${d.id}" data-event="${esc(d.event_id)}">Replay</button></td></tr>`;
}

export function render(root, endpointText) {
  let endpoint = endpointText ? Number(endpointText) : null;
  root.innerHTML = skeleton();
  const $ = sel => root.querySelector(sel);
  let optionsFor = null;

  function say(html) {
    $("#dl-message").innerHTML = html;
    $("#dl-message").hidden = false;
  }

  $("#dl-endpoint").addEventListener("change", ev => {
    const v = ev.target.value;
    location.hash = v ? `#/dead-letters?endpoint=${v}` : "#/dead-letters";
  });

  $("#dl-list").addEventListener("click", act(async ev => {
    const b = ev.target.closest("button[data-replay]");
    if (!b) return;
    b.disabled = true;
    const done = await post("/v1/dead-letters/replay", { ids: [Number(b.dataset.replay)] });
    const event = b.dataset.event;
    say(done.requeued
      ? `Requeued 1 delivery. <a href="#/events/${encodeURIComponent(event)}">Follow event ${esc(event)}</a>`
      : "Nothing requeued: it was replayed already, or its endpoint was deleted.");
    await refresh();
  }));

  $("#dl-bulk").addEventListener("submit", act(async ev => {
    ev.preventDefault();
    const id = Number($("#bulk-endpoint").value);
    const since = $("#bulk-since").value;
    const body = { endpoint_id: id };
    // datetime-local is the browser's local time; the API wants an instant.
    if (since) body.since = new Date(since).toISOString();
    const done = await post("/v1/dead-letters/replay", body);
    say(`Requeued ${num(done.requeued)} ${done.requeued === 1 ? "delivery" : "deliveries"} of ${endpointLink(id)}.`);
    await refresh();
  }));

  async function refresh() {
    const query = endpoint ? `?endpoint_id=${endpoint}&limit=200` : "?limit=200";
    const [list, rows] = await Promise.all([loadEndpoints(), get(`/v1/dead-letters${query}`)]);
    // Options are rebuilt only when the endpoints change: rebuilding them
    // on every poll would reset a choice being made.
    const key = list.map(e => `${e.id}:${e.name}`).join();
    if (optionsFor !== key) {
      optionsFor = key;
      $("#dl-endpoint").innerHTML = endpointOptions(endpoint, "all endpoints");
      $("#bulk-endpoint").innerHTML = endpointOptions(endpoint, "choose an endpoint");
    }
    $("#dl-list").innerHTML = table(["dead at", "endpoint", "event", "type", "attempts", "last result", ""],
      rows.map(row), endpoint ? "no dead letters for this endpoint" : "no dead letters");
  }
  return { refresh, every: 5000 };
}
