// The customer portal: one application's endpoints and deliveries.
//
// Signed in by an HttpOnly SameSite=Strict cookie, so no credential lives in
// this page, its address or browser storage; a state change sends the CSRF
// token the server wrote into the page. Everything the API answers is put on
// the page as text (textContent), never as markup. The page polls every 2 s
// while it is visible, and at once after each action.
import { client, SignedOut, endpointName, ms, when, result, timingParts } from "./api.js";

const POLL_MS = 2000;
const LIMIT = 50;
const FINAL = new Set(["delivered", "dead_letter", "cancelled"]);
const STATUS = {
  pending: "waiting", in_flight: "sending", failed: "retrying",
  delivered: "delivered", dead_letter: "failed", held: "held", cancelled: "cancelled",
};

// An endpoint's state in a customer's words, with what it means for them:
// [word, css class, explanation]. Breakers and thresholds are ours to know.
function health(e, h) {
  if (!e.enabled) return ["Disabled", "off", "Nothing is sent until you enable it; what was queued waits."];
  if (h && h.state !== "closed") {
    return ["Paused after repeated failures", "open", "We try again after a pause, and send what waited once it answers."];
  }
  if (h && h.consecutive_failures > 0) return ["Failing — we retry automatically", "half_open", "Its last answers were errors; each delivery is tried again later."];
  return ["Healthy", "closed", "It answers our requests."];
}

// How often a delivery was tried, without our attempt budget's jargon.
function tries(d) {
  if (!d.attempt_count) return "not yet";
  return d.attempt_count === 1 ? "once" : `${d.attempt_count} times`;
}

const $ = id => document.getElementById(id);

// ---------------------------------------------------------------- the API

const api = client("/portal");
const { get, post, patch, del } = api;

// ---------------------------------------------------------------- building the page

// el("b", {class: "x"}, "text", child): an element whose strings are text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

// Rebuilds a region only when what it shows changed, and gives focus back to
// the control that had it (by its data-key), so polling never steals a click.
function redraw(region, key, build) {
  if (region.dataset.drawn === key) return;
  region.dataset.drawn = key;
  const focused = region.contains(document.activeElement) ? document.activeElement.dataset.key : null;
  region.replaceChildren(...build());
  if (focused) region.querySelector(`[data-key="${CSS.escape(focused)}"]`)?.focus();
}

const pill = (text, cls, title) => el("span", { class: `pill ${cls}`, title }, text);
const statusPill = s => pill(STATUS[s] || s, `st-${s}`);

const label = e => (e ? endpointName(e) : "deleted endpoint");

function rate(h) {
  if (!h || h.success_rate_last_hour === null || h.success_rate_last_hour === undefined) return "no attempts";
  const pct = Math.round(h.success_rate_last_hour * 1000) / 10;
  const n = h.attempts_last_hour;
  return `${pct}% of ${n.toLocaleString()} attempt${n === 1 ? "" : "s"}`;
}

// ---------------------------------------------------------------- state

const state = {
  endpoints: [],
  byId: new Map(),
  health: new Map(),
  deliveries: [],
  dead: 0,
  open: new Set(), // delivery ids whose attempts are shown
  attempts: new Map(), // delivery id → {key, attempts}
  confirming: null, // endpoint id whose rotation waits for a confirmation
  editing: null, // endpoint id whose edit form is open
  deleting: null, // {id, queued}: endpoint whose deletion waits for a confirmation
  payloads: new Map(), // delivery id → its payload, fetched when its details open
  cursor: null, // where the page of deliveries shown starts (null: the newest)
  next: null, // the next (older) page's cursor
  busy: new Set(), // data-keys of buttons whose call is running
  watch: null, // {eventId, deliveryId, what}: followed in the notice until final
  shots: new Map(), // endpoint id → the last test shot's answer (shown, never stored)
};

// ---------------------------------------------------------------- messages

function showError(e) {
  if (e instanceof SignedOut) return;
  $("err").textContent = e.message;
  $("err").hidden = false;
}

function clearError() {
  $("err").hidden = true;
}

function notice(...parts) {
  delete $("notice").dataset.status;
  $("notice").replaceChildren(...parts);
  $("notice").hidden = parts.length === 0;
}

// Runs one action: its button is disabled meanwhile, a failure is shown,
// and the page refreshes at once afterwards.
function action(key, fn) {
  return async () => {
    if (state.busy.has(key)) return;
    clearError();
    state.busy.add(key);
    draw();
    try {
      await fn();
    } catch (e) {
      showError(e);
    } finally {
      state.busy.delete(key);
      refreshNow();
    }
  };
}

function button(text, key, onClick, attrs = {}) {
  const b = el("button", { type: "button", dataset: { key }, disabled: state.busy.has(key), ...attrs }, text);
  b.addEventListener("click", onClick);
  return b;
}

// A button that calls the API (see action).
const actionButton = (text, key, fn, attrs) => button(text, key, action(key, fn), attrs);

// ---------------------------------------------------------------- secrets, shown once

function showSecret(title, secret, note) {
  $("secret-title").textContent = title;
  $("secret-value").value = secret;
  $("secret-note").textContent = note;
  $("secret-copy").textContent = "Copy";
  $("secret").hidden = false;
  $("secret").scrollIntoView({ block: "nearest" });
  $("secret-value").focus();
  $("secret-value").select();
}

$("secret-copy").addEventListener("click", async () => {
  const input = $("secret-value");
  let copied = true;
  try {
    await navigator.clipboard.writeText(input.value);
  } catch {
    input.select(); // no clipboard API (plain http on another host): the old way
    copied = document.execCommand("copy");
  }
  $("secret-copy").textContent = copied ? "Copied" : "Select it and copy";
});

$("secret-done").addEventListener("click", () => {
  $("secret-value").value = "";
  $("secret").hidden = true;
});

// ---------------------------------------------------------------- endpoints

function endpointCard(e) {
  const h = state.health.get(e.id);
  const [word, cls, meaning] = health(e, h);
  const types = e.event_types.includes("*") ? ["all events"] : e.event_types;
  const head = el("div", { class: "card-head" },
    el("b", { class: "name" }, label(e)),
    e.enabled ? pill("enabled", "on") : pill("disabled", "off"),
    pill(word, cls, meaning));
  const stats = el("dl", { class: "stats" },
    el("div", { class: "wide-stat" }, el("dt", {}, "What this means"), el("dd", { "data-state": e.id, class: "small" }, meaning)),
    el("div", {}, el("dt", {}, "p95 latency"), el("dd", {}, ms(h?.p95_ms))),
    el("div", {}, el("dt", {}, "Success (1 h)"), el("dd", {}, rate(h))));
  const toggle = e.enabled
    ? actionButton("Disable", `disable-${e.id}`, () => post(`/v1/endpoints/${e.id}/disable`), { "data-disable": e.id })
    : actionButton("Enable", `enable-${e.id}`, () => post(`/v1/endpoints/${e.id}/enable`), { "data-enable": e.id });
  const actions = el("div", { class: "actions" },
    actionButton("Send test event", `test-${e.id}`, () => sendTest(e), { "data-test": e.id, class: "primary" }),
    actionButton("Test now", `shot-${e.id}`, () => shoot(e), { "data-shot": e.id }),
    toggle,
    button("Rotate secret", `rotate-${e.id}`, () => { state.confirming = e.id; draw(); }, { "data-rotate": e.id }),
    button("Deliveries", `show-${e.id}`, () => filterTo(e.id), { "data-show": e.id }),
    button("Edit", `edit-${e.id}`, () => { state.editing = e.id; draw(); }, { "data-edit": e.id }),
    actionButton("Delete", `delete-${e.id}`, () => remove(e, false), { "data-delete": e.id }));
  const card = el("article", { class: "card", dataset: { endpoint: e.id, enabled: e.enabled } },
    head, el("div", { class: "url", dataset: { kind: e.kind || "http" } },
      e.kind && e.kind !== "http" ? `${e.kind} · ${e.url}` : e.url),
    el("div", { class: "types" }, types.map(t => el("span", { class: "type" }, t))),
    e.enabled ? null : el("p", { class: "dim" }, "Nothing is sent to it until it is enabled again",
      e.disabled_reason && e.disabled_reason !== "disabled by user" ? ` (${e.disabled_reason}).` : "."),
    stats, actions);
  if (state.editing === e.id) card.append(editForm(e));
  if (state.deleting?.id === e.id) {
    card.append(el("div", { class: "confirm", role: "group" },
      el("p", {}, state.deleting.message),
      actionButton("Delete it and give up on them", `delete-yes-${e.id}`, () => remove(e, true), { "data-delete-force": e.id }),
      button("Keep it", `delete-no-${e.id}`, () => { state.deleting = null; draw(); })));
  }
  if (state.confirming === e.id) {
    card.append(el("div", { class: "confirm", role: "group" },
      el("p", {}, "A new secret signs from now on. The current one keeps signing too for 24 hours, so your receiver can switch over."),
      actionButton("Rotate now", `rotate-yes-${e.id}`, () => rotate(e), { "data-rotate-confirm": e.id, class: "primary" }),
      button("Cancel", `rotate-no-${e.id}`, () => { state.confirming = null; draw(); })));
  }
  const shot = state.shots.get(e.id);
  if (shot) card.append(shotResult(e.id, shot));
  return card;
}

// A test shot: one request now, outside the queue; the partner's answer is
// shown here once (status, latency, the first 2 KiB of its body).
async function shoot(e) {
  state.shots.set(e.id, await post(`/v1/endpoints/${e.id}/send-test`));
}

function shotResult(id, s) {
  const line = !s.sent ? `Not sent: ${s.error}`
    : `${result(s.status_code, s.error)} in ${ms(s.latency_ms)}${s.delivered ? "" : " (counts as failed)"}`;
  return el("div", { class: "confirm shot", dataset: { shotResult: id } },
    el("p", {}, el("b", {}, "Test now: "), line),
    s.url ? el("p", { class: "url" }, `${s.method} ${s.url}`) : null,
    s.body ? el("pre", { class: "shot-body" }, s.body + (s.body_truncated ? "\n…" : "")) : null,
    button("Close", `shot-close-${id}`, () => { state.shots.delete(id); draw(); }));
}

// Deleting asks the server first: an endpoint with deliveries on their way
// is kept unless the customer confirms they may be given up (409, then force).
async function remove(e, force) {
  try {
    await del(`/v1/endpoints/${e.id}${force ? "?force=true" : ""}`);
    state.deleting = null;
    notice(`Deleted ${label(e)}: nothing more is sent to it.`);
  } catch (err) {
    if (err.status !== 409) throw err;
    state.deleting = { id: e.id, message: `${label(e)} still has deliveries on their way. Delete it anyway? They will not be sent.` };
  }
}

// Edits in place: the same endpoint, the same signing secret.
function editForm(e) {
  const form = el("form", { class: "add edit", "data-edit-form": e.id },
    el("label", { for: `edit-url-${e.id}` }, "URL"),
    el("input", { id: `edit-url-${e.id}`, name: "url", type: "url", required: true, maxlength: 2000, value: e.url,
      "data-edit-url": e.id }),
    el("label", { for: `edit-types-${e.id}` }, "Event types ", el("span", { class: "dim" }, "(comma-separated; empty for all)")),
    el("input", { id: `edit-types-${e.id}`, name: "event_types", maxlength: 2000,
      value: e.event_types.includes("*") ? "" : e.event_types.join(", ") }),
    el("label", { for: `edit-name-${e.id}` }, "Name"),
    el("input", { id: `edit-name-${e.id}`, name: "name", maxlength: 100, value: e.name || "" }),
    // A postback's template: macros {name}, #name# or {{name}}; |default:VALUE,
    // |raw (query only); {postback_id}, {rand}, {unix_time_ms}.
    el("label", { for: `edit-style-${e.id}` }, "Macro style"),
    el("select", { id: `edit-style-${e.id}`, name: "macro_style", "data-edit-style": e.id },
      ["brace", "hash", "double"].map(v => el("option", { value: v, selected: v === e.macro_style }, v))),
    el("label", { for: `edit-map-${e.id}` }, "Value map ", el("span", { class: "dim" }, "(JSON, optional)")),
    el("textarea", { id: `edit-map-${e.id}`, name: "value_map", rows: 3, "data-edit-map": e.id,
      placeholder: '{"status": {"approved": "1", "*": "0"}}' }, e.value_map ? JSON.stringify(e.value_map) : ""),
    el("p", { class: "error", role: "alert", hidden: true }),
    el("div", { class: "buttons" }, el("button", { type: "submit", class: "primary", "data-edit-save": e.id }, "Save"),
      button("Cancel", `edit-no-${e.id}`, () => { state.editing = null; draw(); })));
  form.addEventListener("submit", async ev => {
    ev.preventDefault();
    const types = form.elements.event_types.value.split(/[\s,]+/).filter(Boolean);
    try {
      let valueMap = null;
      if (form.elements.value_map.value.trim()) {
        try { valueMap = JSON.parse(form.elements.value_map.value); }
        catch { throw new Error("the value map is not JSON"); }
      }
      await patch(`/v1/endpoints/${e.id}`, { url: form.elements.url.value.trim(),
        event_types: types.length ? types : ["*"], name: form.elements.name.value.trim() || null,
        macro_style: form.elements.macro_style.value, value_map: valueMap });
      state.editing = null;
      notice(`Saved ${form.elements.name.value.trim() || form.elements.url.value.trim()}: the signing secret is unchanged.`);
    } catch (err) {
      if (err instanceof SignedOut) return;
      form.querySelector(".error").textContent = err.message;
      form.querySelector(".error").hidden = false;
      return;
    }
    refreshNow();
  });
  return form;
}

async function rotate(e) {
  const doc = await post(`/v1/endpoints/${e.id}/rotate-secret`);
  state.confirming = null;
  const hours = Math.round((doc.grace_s ?? 0) / 3600);
  showSecret(`New signing secret for ${label(e)}`, doc.secret,
    hours ? `The previous secret also signs for the next ${hours} hours.` : "The previous secret no longer signs.");
}

async function sendTest(e) {
  const doc = await post(`/v1/endpoints/${e.id}/test`);
  // Show it in the list whatever was filtered before.
  $("f-status").value = "";
  if ($("f-endpoint").value && Number($("f-endpoint").value) !== e.id) $("f-endpoint").value = "";
  state.watch = { eventId: doc.event_id, deliveryId: doc.deliveries[0], what: `Test event to ${label(e)}` };
  following("pending");
}

function filterTo(id) {
  $("f-endpoint").value = String(id);
  refreshNow();
  $("deliveries").scrollIntoView({ block: "start" });
}

function drawEndpoints() {
  const key = JSON.stringify([state.endpoints, [...state.health.values()], state.confirming, [...state.busy],
    [...state.shots], state.editing, state.deleting]);
  redraw($("endpoints"), key, () => state.endpoints.length
    ? state.endpoints.map(endpointCard)
    : [el("p", { class: "dim" }, "No endpoints yet. Add the URL where you want to receive webhooks.")]);
  const select = $("f-endpoint");
  const chosen = select.value;
  const options = [el("option", { value: "" }, "All endpoints"),
    ...state.endpoints.map(e => el("option", { value: e.id }, label(e)))];
  redraw(select, JSON.stringify(state.endpoints.map(e => [e.id, label(e)])), () => options);
  select.value = chosen;
}

// ---------------------------------------------------------------- adding one

function openAdd(open) {
  $("add-form").hidden = !open;
  $("add-toggle").setAttribute("aria-expanded", String(open));
  $("add-error").hidden = true;
  if (open) {
    $("add-url").focus();
    showCatalogue();
  }
}

// The event-type catalogue (this application's types and the catalogue-wide
// ones), each with its description and an example payload; ticking one
// adds its name to the event types field, which stays free text.
function typedNames() {
  return $("add-types").value.split(/[\s,]+/).filter(Boolean);
}

function pick(name, chosen) {
  const names = typedNames().filter(n => n !== name);
  $("add-types").value = (chosen ? [...names, name] : names).join(", ");
}

async function showCatalogue() {
  let types;
  try {
    types = await get("/v1/event-types");
  } catch (e) {
    if (e instanceof SignedOut) return;
    types = [];  // the field still takes names typed by hand
  }
  const typed = new Set(typedNames());
  $("catalogue-types").replaceChildren(...types.map(t => el("div", { class: "catalogue-type" },
    el("label", {},
      el("input", { type: "checkbox", value: t.name, "data-type": t.name, checked: typed.has(t.name) }),
      el("code", {}, t.name)),
    t.description ? el("p", { class: "dim" }, t.description) : null,
    t.example === null ? null : el("details", {},
      el("summary", {}, "Example payload"),
      el("pre", { "data-example": t.name }, JSON.stringify(t.example, null, 2))))));
  $("catalogue").hidden = types.length === 0;
}

$("catalogue-types").addEventListener("change", ev => {
  if (ev.target.dataset.type) pick(ev.target.dataset.type, ev.target.checked);
});

$("add-toggle").addEventListener("click", () => openAdd($("add-form").hidden));
$("add-cancel").addEventListener("click", () => openAdd(false));

$("add-form").addEventListener("submit", async ev => {
  ev.preventDefault();
  const form = ev.target;
  const submit = form.querySelector("button[type=submit]");
  const types = $("add-types").value.split(/[\s,]+/).filter(Boolean);
  const body = { url: $("add-url").value.trim(), event_types: types.length ? types : ["*"] };
  if ($("add-name").value.trim()) body.name = $("add-name").value.trim();
  submit.disabled = true;
  try {
    const doc = await post("/v1/endpoints", body);
    form.reset();
    openAdd(false);
    showSecret(`Signing secret for ${label(doc)}`, doc.secret, "");
  } catch (e) {
    if (e instanceof SignedOut) return;
    $("add-error").textContent = e.message;
    $("add-error").hidden = false;
  } finally {
    submit.disabled = false;
    refreshNow();
  }
});

// ---------------------------------------------------------------- deliveries

function attemptList(d) {
  const found = state.attempts.get(d.id);
  if (!found) return el("p", { class: "dim" }, "Loading attempts…");
  if (!found.attempts.length) return el("p", { class: "dim" }, "Not attempted yet.");
  return el("ol", { class: "attempts" }, found.attempts.map(a => el("li", {},
    el("span", { class: "when" }, when(a.at)),
    el("b", {}, a.status_code !== null ? `HTTP ${a.status_code}` : "no response"),
    el("span", {}, ms(a.response_ms)),
    a.error && a.error !== `HTTP ${a.status_code}` ? el("span", { class: "error-text" }, a.error) : null,
    timing(a.timings_ms),
    a.remote_addr ? el("span", { class: "dim" }, `from ${a.remote_addr}`) : null,
    a.response_excerpt ? el("pre", { class: "excerpt" }, a.response_excerpt) : null)));
}

// An attempt's phases as a bar (the console's delivery page draws the same).
function timing(t) {
  const parts = timingParts(t);
  if (!parts.length) return null;
  const said = parts.map(([, , what]) => what).join(" · ");
  // Widths through the CSSOM: the portal's CSP allows no inline style.
  return el("span", { class: "timing", role: "img", "aria-label": said, title: said },
    ...parts.map(([cls, width]) => {
      const seg = el("span", { class: cls });
      seg.style.width = `${width}%`;
      return seg;
    }));
}

function replay(ids, what) {
  return async () => {
    const n = (await post("/v1/dead-letters/replay", { ids })).requeued;
    state.watch = ids.length === 1 && n === 1 ? { ...what, what: "Replayed delivery" } : null;
    if (state.watch) following("pending");
    else notice(`Requeued ${n} ${n === 1 ? "delivery" : "deliveries"}: sent again from now.`);
  };
}

function deliveryRows(d) {
  const e = state.byId.get(d.endpoint_id);
  const open = state.open.has(d.id);
  const last = d.last_status_code === null && !d.last_error
    ? "–" : `${result(d.last_status_code, d.last_error)}${d.last_response_ms !== null ? ` · ${ms(d.last_response_ms)}` : ""}`;
  const buttons = el("td", { class: "row-actions" },
    button(open ? "Hide" : "Details", `open-${d.id}`, () => toggleOpen(d), { "data-open": d.id, "aria-expanded": String(open) }),
    d.status === "dead_letter"
      ? actionButton("Replay", `replay-${d.id}`, replay([d.id], { eventId: d.event_id, deliveryId: d.id }), { "data-replay": d.id })
      : null);
  const row = el("tr", { dataset: { delivery: d.id, status: d.status }, class: state.watch?.deliveryId === d.id ? "watched" : null },
    el("td", { "data-label": "Time", title: d.created_at }, when(d.created_at)),
    el("td", { "data-label": "Event" }, el("code", { class: "event-id" }, d.event_id), el("div", { class: "dim" }, d.event_type)),
    el("td", { "data-label": "Endpoint" }, label(e)),
    el("td", { "data-label": "Status" }, statusPill(d.status)),
    el("td", { "data-label": "Tries" }, tries(d)),
    el("td", { "data-label": "Last response", class: "last" }, last),
    buttons);
  if (!open) return [row];
  return [row, el("tr", { class: "detail", dataset: { attemptsOf: d.id } },
    el("td", { colspan: 7 }, el("div", { class: "dim" }, `Delivery #${d.id} · ${d.event_type}`,
      d.delivered_at ? ` · delivered ${when(d.delivered_at)}` : ""), attemptList(d),
      el("details", { class: "payload", open: true }, el("summary", {}, "What was sent"),
        state.payloads.has(d.id)
          ? el("pre", { "data-payload": d.id }, JSON.stringify(state.payloads.get(d.id), null, 2))
          : el("p", { class: "dim" }, "Loading…"))))];
}

function toggleOpen(d) {
  if (state.open.has(d.id)) state.open.delete(d.id);
  else state.open.add(d.id);
  draw();
  if (state.open.has(d.id)) {
    loadAttempts([d]).then(draw, showError);
    if (!state.payloads.has(d.id)) {
      get(`/v1/deliveries/${d.id}`).then(doc => { state.payloads.set(d.id, doc.payload); draw(); }, showError);
    }
  }
}

// The attempts of the open deliveries, fetched again only when they changed.
async function loadAttempts(list) {
  const stale = list.filter(d => state.open.has(d.id)
    && state.attempts.get(d.id)?.key !== `${d.status}/${d.attempt_count}`);
  const events = [...new Set(stale.map(d => d.event_id))];
  await Promise.all(events.map(async eventId => {
    for (const d of (await get(`/v1/deliveries?event_id=${encodeURIComponent(eventId)}`)).deliveries) {
      state.attempts.set(d.id, { key: `${d.status}/${d.attempt_count}`, attempts: d.attempts });
    }
  }));
}

function drawDeliveries() {
  const list = state.deliveries;
  const key = JSON.stringify([list, [...state.open], [...state.attempts], [...state.busy], state.watch?.deliveryId,
    [...state.payloads.keys()],
    state.endpoints.map(e => [e.id, label(e)])]);
  redraw($("deliveries").tBodies[0], key, () => list.flatMap(deliveryRows));
  $("deliveries").hidden = list.length === 0;
  const filtered = $("f-status").value || $("f-endpoint").value || $("f-event").value || $("f-since").value;
  $("deliveries-empty").textContent = filtered ? "No deliveries match these filters."
    : "No deliveries yet. Send a test event to an endpoint to see one here.";
  $("deliveries-empty").hidden = list.length > 0;
  const dead = list.filter(d => d.status === "dead_letter");
  const all = $("replay-all");
  all.hidden = $("f-status").value !== "dead_letter" || dead.length < 2;
  all.textContent = `Replay all ${dead.length} shown`;
  $("dead-note").replaceChildren();
  if (state.dead && $("f-status").value !== "dead_letter") {
    const show = el("button", { type: "button", class: "link", id: "show-dead" },
      `${state.dead >= 100 ? "100+" : state.dead} failed, no more retries`);
    show.addEventListener("click", () => { $("f-status").value = "dead_letter"; refreshNow(); });
    $("dead-note").append(show);
  }
}

$("replay-all").addEventListener("click", action("replay-all", () => {
  const ids = state.deliveries.filter(d => d.status === "dead_letter").map(d => d.id);
  return replay(ids, {})();
}));

// A new search starts again at the newest deliveries.
function search() {
  state.cursor = null;
  refreshNow();
}
for (const id of ["f-status", "f-endpoint", "f-since"]) $(id).addEventListener("change", search);
$("filters").addEventListener("submit", ev => { ev.preventDefault(); search(); });
$("older").addEventListener("click", () => { state.cursor = state.next; refreshNow(); });
$("newest").addEventListener("click", search);

// "Resend everything that failed since…": every endpoint's failed
// deliveries since that time, sent again with fresh retries.
$("resend").addEventListener("submit", action("resend", async () => {
  const since = $("resend-since").value;
  if (!since) return;
  const n = (await post("/v1/dead-letters/replay", { since: new Date(since).toISOString() })).requeued;
  notice(n ? `Resending ${n} failed ${n === 1 ? "delivery" : "deliveries"} from now.` : "Nothing failed since then.");
}));
$("resend").addEventListener("submit", ev => ev.preventDefault());

// ---------------------------------------------------------------- the followed event

async function drawWatch() {
  const w = state.watch;
  if (!w) return;
  let d = state.deliveries.find(x => x.id === w.deliveryId);
  if (!d) d = (await get(`/v1/deliveries?event_id=${encodeURIComponent(w.eventId)}`)).deliveries.find(x => x.id === w.deliveryId);
  if (!d) return;
  const outcome = d.status === "delivered" ? `delivered, ${result(d.last_status_code, null)} in ${ms(d.last_response_ms)}`
    : d.status === "dead_letter" ? `gave up, ${result(d.last_status_code, d.last_error)}`
    : d.attempt_count ? `${STATUS[d.status]} (last: ${result(d.last_status_code, d.last_error)})` : undefined;
  following(d.status, outcome);
  if (FINAL.has(d.status)) state.watch = null;
}

// The notice about the followed event: what it is, and where it stands.
function following(status, outcome = `${STATUS[status]}…`) {
  const w = state.watch;
  notice(`${w.what} (`, el("code", { class: "event-id" }, w.eventId), `): ${outcome}`);
  $("notice").dataset.status = status;
}

// ---------------------------------------------------------------- refreshing

function draw() {
  drawEndpoints();
  drawDeliveries();
}

// An action asks for a refresh: at once, or right after the one under way.
let wake = () => {};
let again = false;
function refreshNow() {
  again = true;
  wake();
}

async function refresh() {
  const params = new URLSearchParams({ limit: String(LIMIT) });
  if ($("f-status").value) params.set("status", $("f-status").value);
  if ($("f-endpoint").value) params.set("endpoint_id", $("f-endpoint").value);
  if ($("f-event").value.trim()) params.set("event_id", $("f-event").value.trim());
  // A date is the start of that day where the customer is.
  if ($("f-since").value) params.set("since", new Date(`${$("f-since").value}T00:00`).toISOString());
  if (state.cursor) params.set("cursor", state.cursor);
  const [endpoints, health, deliveries, dead] = await Promise.all([
    get("/v1/endpoints"), get("/v1/endpoints/health"), get(`/v1/deliveries?${params}`),
    get("/v1/dead-letters?limit=100"),
  ]);
  state.endpoints = endpoints;
  state.byId = new Map(endpoints.map(e => [e.id, e]));
  state.health = new Map(health.map(h => [h.endpoint_id, h]));
  state.deliveries = deliveries.deliveries;
  state.next = deliveries.next_cursor;
  $("older").hidden = !state.next;
  $("newest").hidden = !state.cursor;
  state.dead = dead.length;
  await loadAttempts(state.deliveries);
  await drawWatch();
  draw();
}

async function loop() {
  for (;;) {
    again = false;
    try {
      await refresh();
      $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (e instanceof SignedOut) return;
      $("updated").textContent = `cannot reach the server (${e.message}); retrying…`;
    }
    if (!again) {
      await new Promise(resolve => {
        const timer = setTimeout(resolve, POLL_MS);
        wake = () => { clearTimeout(timer); resolve(); };
      });
    }
    while (document.hidden) await new Promise(resolve => { wake = resolve; });
  }
}

document.addEventListener("visibilitychange", () => { if (!document.hidden) wake(); });

$("signout").addEventListener("click", () => api.signOut("/portal/logout"));

loop();
