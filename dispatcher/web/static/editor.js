// Adding an endpoint (#/endpoints/new) and editing one (#/endpoints/ID/edit):
// its URL, name, event types (offered from the event-type catalogue, each
// with its description and an example payload), limits, retry policy and
// breaker. An edit keeps the id and the secret (PATCH); a new endpoint's
// secret is shown once, here.
import { get, post, patch, act, esc } from "./api.js";

// [field, label, unit / hint, input attributes]
const NUMBERS = [
  ["rate_per_s", "Rate", "requests per second; empty: unlimited", 'step="any" min="0.001" max="100000"'],
  ["burst", "Burst", "requests at once above the rate; empty: the rate", 'step="1" min="1" max="100000"'],
  ["max_in_flight", "In flight", "requests at the same time", 'step="1" min="1" max="10000"'],
  ["timeout_ms", "Timeout", "ms", 'step="1" min="100" max="300000"'],
  ["max_attempts", "Attempts", "before a dead letter", 'step="1" min="1" max="100"'],
  ["retry_base_ms", "Retry base", "ms, doubled each attempt", 'step="1" min="0" max="86400000"'],
  ["retry_cap_ms", "Retry cap", "ms, the longest wait", 'step="1" min="0" max="604800000"'],
  ["failure_threshold", "Breaker opens after", "failures in a row", 'step="1" min="1" max="10000"'],
  ["cooldown_s", "Breaker cool-down", "seconds", 'step="any" min="1" max="86400"'],
];
const NULLABLE = new Set(["rate_per_s", "burst"]);

function skeleton(isNew) {
  const numbers = NUMBERS.map(([k, label, hint, attrs]) =>
    `<label>${esc(label)} <input type="number" id="ed-${k}" name="${k}" ${attrs}><small class="dim">${esc(hint)}</small></label>`).join("");
  return `
  <section class="wide">
    <h2 id="ed-title" class="plain">${isNew ? "Add an endpoint" : "Edit endpoint"}</h2>
    <form id="ed-form" class="grid-form">
      <label class="full">URL <input id="ed-url" name="url" type="url" required maxlength="2048" placeholder="https://example.com/webhooks"></label>
      <label>Name <input id="ed-name" name="name" maxlength="100"></label>
      <label${isNew ? "" : " hidden"}>Application <select id="ed-app" name="app"></select></label>
      <label class="full">Description <input id="ed-description" name="description" maxlength="1000"></label>
      <label class="full">Event types <input id="ed-types" name="event_types" maxlength="2000" placeholder="empty: every type (order.paid, order.refunded)"></label>
      <fieldset id="ed-catalogue" class="catalogue full" hidden><legend>Event types in the catalogue</legend><div id="ed-catalogue-types"></div></fieldset>
      <h3 class="full">Limits, retries and breaker</h3>
      ${numbers}
      <p id="ed-error" class="error full" role="alert" hidden></p>
      <div class="buttons full"><button type="submit" class="primary">${isNew ? "Add endpoint" : "Save"}</button>
        <a id="ed-cancel" href="#/">Cancel</a></div>
    </form>
  </section>
  <section class="wide" id="ed-secret" hidden>
    <h2 class="plain">Signing secret</h2>
    <p>The receiver checks signatures with this secret. <b>It is shown only now.</b></p>
    <input id="ed-secret-value" readonly class="secret-value" aria-label="Signing secret">
    <p><a id="ed-open" href="#/">Open the endpoint</a></p>
  </section>`;
}

const typed = $ => $("#ed-types").value.split(/[\s,]+/).filter(Boolean);

async function catalogue($, app) {
  let types = [];
  try {
    types = await get(`/v1/event-types${app ? `?app=${encodeURIComponent(app)}` : ""}`);
  } catch { /* the field still takes names typed by hand */ }
  const chosen = new Set(typed($));
  $("#ed-catalogue-types").innerHTML = types.map(t => `<div class="catalogue-type">
    <label><input type="checkbox" data-type="${esc(t.name)}"${chosen.has(t.name) ? " checked" : ""}> <code>${esc(t.name)}</code></label>
    ${t.description ? `<p class="dim">${esc(t.description)}</p>` : ""}
    ${t.example === null || t.example === undefined ? "" : `<details><summary>Example payload</summary><pre data-example="${esc(t.name)}">${esc(JSON.stringify(t.example, null, 2))}</pre></details>`}
  </div>`).join("");
  $("#ed-catalogue").hidden = types.length === 0;
}

export function render(root, idText) {
  const isNew = !idText;
  const id = isNew ? null : Number(idText);
  root.innerHTML = skeleton(isNew);
  const $ = sel => root.querySelector(sel);
  let loaded = false;

  $("#ed-catalogue-types").addEventListener("change", ev => {
    const name = ev.target.dataset.type;
    if (!name) return;
    const names = typed($).filter(n => n !== name && n !== "*");
    $("#ed-types").value = (ev.target.checked ? [...names, name] : names).join(", ");
  });
  $("#ed-app").addEventListener("change", () => catalogue($, $("#ed-app").value));
  if (!isNew) $("#ed-cancel").href = `#/endpoints/${id}`;

  $("#ed-form").addEventListener("submit", act(async ev => {
    ev.preventDefault();
    $("#ed-error").hidden = true;
    const types = typed($);
    const body = { url: $("#ed-url").value.trim(), event_types: types.length ? types : ["*"],
      name: $("#ed-name").value.trim() || null, description: $("#ed-description").value.trim() || null };
    for (const [k] of NUMBERS) {
      const v = $(`#ed-${k}`).value;
      if (v === "") { if (NULLABLE.has(k)) body[k] = null; continue; }
      body[k] = Number(v);
    }
    const submit = $("#ed-form button[type=submit]");
    submit.disabled = true;
    try {
      if (isNew) {
        if ($("#ed-app").value) body.app = $("#ed-app").value;
        for (const k of NULLABLE) if (body[k] === null) delete body[k];
        if (!body.name) delete body.name;
        if (!body.description) delete body.description;
        const doc = await post("/v1/endpoints", body);
        $("#ed-form").hidden = true;
        $("#ed-secret-value").value = doc.secret;
        $("#ed-open").href = `#/endpoints/${doc.id}`;
        $("#ed-secret").hidden = false;
      } else {
        await patch(`/v1/endpoints/${id}`, body);
        location.hash = `#/endpoints/${id}`;
      }
    } catch (e) {
      $("#ed-error").textContent = e.message;
      $("#ed-error").hidden = false;
    } finally {
      submit.disabled = false;
    }
  }));

  // Filled once: polling must not overwrite what is being typed.
  async function refresh() {
    if (loaded) return;
    loaded = true;
    if (isNew) {
      const apps = await get("/v1/applications");
      const wanted = new URLSearchParams(location.hash.split("?")[1] || "").get("app") || "default";
      $("#ed-app").innerHTML = apps.map(a => `<option value="${esc(a.id)}"${a.id === wanted ? " selected" : ""}>${esc(a.name)} (${esc(a.id)})</option>`).join("");
      for (const [k] of NUMBERS) if (!NULLABLE.has(k)) $(`#ed-${k}`).placeholder = "default";
      await catalogue($, $("#ed-app").value);
      return;
    }
    const e = await get(`/v1/endpoints/${id}`);
    $("#ed-title").textContent = `Edit endpoint #${id}${e.name ? `: ${e.name}` : ""}`;
    $("#ed-url").value = e.url;
    $("#ed-name").value = e.name || "";
    $("#ed-description").value = e.description || "";
    $("#ed-types").value = e.event_types.includes("*") ? "" : e.event_types.join(", ");
    for (const [k] of NUMBERS) $(`#ed-${k}`).value = e[k] === null || e[k] === undefined ? "" : String(e[k]);
    await catalogue($, e.app);
  }
  return { refresh, every: 60000 };
}

