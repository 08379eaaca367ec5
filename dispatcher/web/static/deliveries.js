// The deliveries browser (#/deliveries?status=…&endpoint_id=…): every
// delivery, newest first, narrowed by status, endpoint, application, event
// type, event id and a time range, a page at a time. The filters live in
// the address, so a search can be bookmarked or sent to a colleague.
import { get, post, act, loadEndpoints, endpointLink, endpointOptions, esc, num, ms, when, instant, statusPill, result, table } from "./api.js";

const FIELDS = ["status", "endpoint_id", "app", "event_type", "event_id", "since", "until"];

function skeleton() {
  return `
  <section class="wide">
    <h2>Deliveries</h2>
    <form id="dv-search" class="grid-form">
      <label>Status <select id="dv-status" name="status">
        <option value="">any</option><option value="dead_letter">dead letter</option>
        <option value="failed">retry scheduled</option><option value="pending">pending</option>
        <option value="in_flight">in flight</option><option value="delivered">delivered</option></select></label>
      <label>Endpoint <select id="dv-endpoint" name="endpoint_id"></select></label>
      <label>Application <select id="dv-app" name="app"><option value="">any</option></select></label>
      <label>Event type <input id="dv-type" name="event_type" maxlength="256" placeholder="order.paid"></label>
      <label>Event id <input id="dv-event" name="event_id" maxlength="200" placeholder="evt_…"></label>
      <label>Created from <input id="dv-since" name="since" type="datetime-local" step="1"></label>
      <label>until <input id="dv-until" name="until" type="datetime-local" step="1"></label>
      <div class="buttons"><button type="submit" class="primary">Search</button>
        <button type="button" id="dv-clear">Clear</button></div>
    </form>
    <p id="dv-message" class="note" role="status" hidden></p>
    <div id="dv-list"></div>
    <div class="pager"><button type="button" id="dv-first" hidden>Newest</button>
      <button type="button" id="dv-next" hidden>Next page</button></div>
  </section>`;
}

function row(d) {
  const replay = d.status === "dead_letter" ? `<button type="button" data-replay="${d.id}">Replay</button>` : "";
  return `<tr data-delivery="${d.id}" data-status="${esc(d.status)}">
    <td><a href="#/delivery/${d.id}">${esc(when(d.created_at))}</a></td>
    <td>${endpointLink(d.endpoint_id)}</td><td>${esc(d.app)}</td>
    <td><a href="#/events/${encodeURIComponent(d.event_id)}">${esc(d.event_id)}</a></td><td>${esc(d.event_type)}</td>
    <td>${statusPill(d.status)}</td><td>${num(d.attempt_count)} of ${num(d.max_attempts)}</td>
    <td class="wrap">${esc(result(d.last_status_code, d.last_error))}${d.last_response_ms !== null ? ` · ${ms(d.last_response_ms)}` : ""}</td>
    <td><a href="#/delivery/${d.id}" data-open="${d.id}">Payload</a> ${replay}</td></tr>`;
}

// The search in the address: datetime-local values as typed, the API gets instants.
function parse(query) {
  const p = new URLSearchParams(query || "");
  return Object.fromEntries(FIELDS.map(k => [k, p.get(k) || ""]));
}

export function render(root, query) {
  const filters = parse(query);
  root.innerHTML = skeleton();
  const $ = sel => root.querySelector(sel);
  let cursor = null, next = null, apps = null, optionsFor = null;

  const inputs = { status: "#dv-status", endpoint_id: "#dv-endpoint", app: "#dv-app", event_type: "#dv-type",
    event_id: "#dv-event", since: "#dv-since", until: "#dv-until" };
  for (const [k, sel] of Object.entries(inputs)) $(sel).value = filters[k];

  $("#dv-search").addEventListener("submit", ev => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, sel] of Object.entries(inputs)) if ($(sel).value.trim()) p.set(k, $(sel).value.trim());
    const hash = `#/deliveries${p.toString() ? `?${p}` : ""}`;
    if (location.hash === hash) refresh().catch(() => {});
    else location.hash = hash;
  });
  $("#dv-clear").addEventListener("click", () => { location.hash = "#/deliveries"; });
  $("#dv-next").addEventListener("click", act(async () => { cursor = next; await refresh(); window.scrollTo(0, 0); }));
  $("#dv-first").addEventListener("click", act(async () => { cursor = null; await refresh(); }));
  $("#dv-list").addEventListener("click", act(async ev => {
    const b = ev.target.closest("button[data-replay]");
    if (!b) return;
    b.disabled = true;
    const done = await post("/v1/dead-letters/replay", { ids: [Number(b.dataset.replay)] });
    $("#dv-message").textContent = done.requeued ? "Requeued 1 delivery: it is sent again from now." : "Nothing requeued.";
    $("#dv-message").hidden = false;
    await refresh();
  }));

  async function refresh() {
    const p = new URLSearchParams({ limit: "50" });
    for (const k of FIELDS) {
      if (!filters[k]) continue;
      p.set(k, k === "since" || k === "until" ? instant(filters[k]) : filters[k]);
    }
    if (cursor) p.set("cursor", cursor);
    const [list, page] = await Promise.all([loadEndpoints(), get(`/v1/deliveries?${p}`),
      apps ? null : get("/v1/applications").then(a => { apps = a; })]);
    const key = list.map(e => `${e.id}:${e.name}`).join();
    if (optionsFor !== key) {
      optionsFor = key;
      $("#dv-endpoint").innerHTML = endpointOptions(Number(filters.endpoint_id) || null, "any");
      $("#dv-app").innerHTML = `<option value="">any</option>` + apps.map(a =>
        `<option value="${esc(a.id)}"${a.id === filters.app ? " selected" : ""}>${esc(a.name)} (${esc(a.id)})</option>`).join("");
    }
    next = page.next_cursor;
    $("#dv-list").innerHTML = table(["created", "endpoint", "application", "event", "type", "status", "attempts", "last result", ""],
      page.deliveries.map(row), "no deliveries match this search");
    $("#dv-next").hidden = !next;
    $("#dv-first").hidden = !cursor;
  }
  // A page further back stays put; the newest page follows what arrives.
  return { refresh, every: () => (cursor ? 60000 : 5000) };
}
