// Dead letters (#/dead-letters, ?endpoint=ID to narrow): the newest ones a
// page at a time, each selectable; the selection (or the whole page) is
// replayed in one call. Below, the replay of one endpoint's since a time,
// for when a receiver is back after an outage. A replay gives a fresh
// attempt budget.
import { getPage, post, act, loadEndpoints, endpointLink, endpointOptions, esc, num, when, instant, result, table } from "./api.js";

const PAGE = 100;

function skeleton() {
  return `
  <section class="wide">
    <h2>Dead letters</h2>
    <form id="dl-filter" class="inline">
      <label for="dl-endpoint">Endpoint</label><select id="dl-endpoint"></select>
      <span class="spacer"></span>
      <button type="button" id="dl-replay-selected" disabled>Replay selected</button>
    </form>
    <p id="dl-message" class="note" role="status" hidden></p>
    <div id="dl-list"></div>
    <div class="pager"><button type="button" id="dl-first" hidden>Newest</button>
      <button type="button" id="dl-next" hidden>Next page</button></div>
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

function row(d, selected) {
  return `<tr data-dead-letter="${d.id}">
    <td><input type="checkbox" data-select="${d.id}" aria-label="select dead letter ${d.id}"${selected ? " checked" : ""}></td>
    <td>${esc(when(d.dead_at))}</td><td>${endpointLink(d.endpoint_id)}</td>
    <td><a href="#/events/${encodeURIComponent(d.event_id)}">${esc(d.event_id)}</a></td><td>${esc(d.event_type)}</td>
    <td>${num(d.attempt_count)}</td><td class="wrap">${esc(result(d.last_status_code, d.last_error))}</td>
    <td><a href="#/delivery/${d.id}">Payload</a> <button type="button" data-replay="${d.id}" data-event="${esc(d.event_id)}">Replay</button></td></tr>`;
}

export function render(root, endpointText) {
  const endpoint = endpointText ? Number(endpointText) : null;
  root.innerHTML = skeleton();
  const $ = sel => root.querySelector(sel);
  let optionsFor = null, cursor = null, next = null, rows = [], drawn = null;
  const selected = new Set();

  function say(html) {
    $("#dl-message").innerHTML = html;
    $("#dl-message").hidden = false;
  }

  function counts() {
    const b = $("#dl-replay-selected");
    b.disabled = selected.size === 0;
    b.textContent = selected.size ? `Replay ${num(selected.size)} selected` : "Replay selected";
    const all = $("#dl-all");
    if (all) {
      all.checked = rows.length > 0 && rows.every(d => selected.has(d.id));
      all.indeterminate = !all.checked && rows.some(d => selected.has(d.id));
    }
  }

  function draw() {
    const key = JSON.stringify([rows.map(d => d.id), optionsFor]);
    if (key === drawn) return counts();
    drawn = key;
    const head = `<input type="checkbox" id="dl-all" aria-label="select the whole page">`;
    $("#dl-list").innerHTML = table(["", "dead at", "endpoint", "event", "type", "attempts", "last result", ""],
      rows.map(d => row(d, selected.has(d.id))), endpoint ? "no dead letters for this endpoint" : "no dead letters")
      .replace("<th></th>", `<th>${head}</th>`);
    $("#dl-all").addEventListener("change", ev => {
      for (const d of rows) (ev.target.checked ? selected.add(d.id) : selected.delete(d.id));
      for (const box of root.querySelectorAll("input[data-select]")) box.checked = ev.target.checked;
      counts();
    });
    counts();
  }

  async function replay(ids) {
    const done = await post("/v1/dead-letters/replay", { ids });
    for (const id of ids) selected.delete(id);
    return done.requeued;
  }

  $("#dl-endpoint").addEventListener("change", ev => {
    const v = ev.target.value;
    location.hash = v ? `#/dead-letters?endpoint=${v}` : "#/dead-letters";
  });

  $("#dl-list").addEventListener("change", ev => {
    const box = ev.target.closest("input[data-select]");
    if (!box) return;
    const id = Number(box.dataset.select);
    if (box.checked) selected.add(id); else selected.delete(id);
    counts();
  });

  $("#dl-list").addEventListener("click", act(async ev => {
    const b = ev.target.closest("button[data-replay]");
    if (!b) return;
    b.disabled = true;
    const n = await replay([Number(b.dataset.replay)]);
    const event = b.dataset.event;
    say(n
      ? `Requeued 1 delivery. <a href="#/events/${encodeURIComponent(event)}">Follow event ${esc(event)}</a>`
      : "Nothing requeued: it was replayed already, or its endpoint was deleted.");
    await refresh();
  }));

  $("#dl-replay-selected").addEventListener("click", act(async () => {
    $("#dl-replay-selected").disabled = true;
    const n = await replay([...selected]);
    say(`Requeued ${num(n)} ${n === 1 ? "delivery" : "deliveries"}: they are sent again from now.`);
    await refresh();
  }));

  $("#dl-next").addEventListener("click", act(async () => { cursor = next; await refresh(); window.scrollTo(0, 0); }));
  $("#dl-first").addEventListener("click", act(async () => { cursor = null; await refresh(); }));

  $("#dl-bulk").addEventListener("submit", act(async ev => {
    ev.preventDefault();
    const id = Number($("#bulk-endpoint").value);
    const body = { endpoint_id: id };
    // datetime-local is the browser's local time; the API wants an instant.
    const since = instant($("#bulk-since").value);
    if (since) body.since = since;
    const done = await post("/v1/dead-letters/replay", body);
    say(`Requeued ${num(done.requeued)} ${done.requeued === 1 ? "delivery" : "deliveries"} of ${endpointLink(id)}.`);
    await refresh();
  }));

  async function refresh() {
    const p = new URLSearchParams({ limit: String(PAGE) });
    if (endpoint) p.set("endpoint_id", String(endpoint));
    if (cursor) p.set("cursor", cursor);
    const [list, page] = await Promise.all([loadEndpoints(), getPage(`/v1/dead-letters?${p}`)]);
    // Options are rebuilt only when the endpoints change: rebuilding them
    // on every poll would reset a choice being made.
    const key = list.map(e => `${e.id}:${e.name}`).join();
    if (optionsFor !== key) {
      optionsFor = key;
      $("#dl-endpoint").innerHTML = endpointOptions(endpoint, "all endpoints");
      $("#bulk-endpoint").innerHTML = endpointOptions(endpoint, "choose an endpoint");
    }
    rows = page.doc;
    next = page.next;
    const shown = new Set(rows.map(d => d.id));
    for (const id of [...selected]) if (!shown.has(id)) selected.delete(id);
    draw();
    $("#dl-next").hidden = !next;
    $("#dl-first").hidden = !cursor;
  }
  return { refresh, every: 5000 };
}
