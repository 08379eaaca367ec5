// Applications (#/applications): the customers an operator sends webhooks
// to. Create one, set its quotas, issue an API token (shown once, here),
// and make a one-time portal sign-in link to hand to the customer.
import { get, post, patch, act, esc, num, when, table } from "./api.js";

function skeleton() {
  return `
  <section class="wide">
    <h2>Applications</h2>
    <form id="app-create" class="inline">
      <label for="app-id">Id</label><input id="app-id" required pattern="[a-z0-9_\\-]{1,64}" maxlength="64" placeholder="acme">
      <label for="app-name">Name</label><input id="app-name" maxlength="200" placeholder="Acme Corp">
      <button type="submit" class="primary">Create application</button>
    </form>
    <div id="app-shown" class="note" role="status" hidden></div>
    <div id="app-list"></div>
  </section>`;
}

function quota(v) {
  return v === null || v === undefined ? "" : String(v);
}

function row(a) {
  return `<tr data-app="${esc(a.id)}">
    <td><b>${esc(a.name)}</b><div class="dim">${esc(a.id)} · since ${esc(when(a.created_at))}</div></td>
    <td><a href="#/deliveries?app=${encodeURIComponent(a.id)}">${num(a.endpoints)} endpoints</a></td><td>${num(a.queue_depth)}</td>
    <td><form class="inline quota" data-quota="${esc(a.id)}">
      <input type="number" min="0" max="1000000" step="1" name="max_endpoints" aria-label="max endpoints" placeholder="no limit" value="${quota(a.max_endpoints)}">
      <input type="number" min="0.001" max="1000000" step="any" name="max_events_per_s" aria-label="max events per second" placeholder="no limit" value="${quota(a.max_events_per_s)}">
      <button type="submit">Set</button></form></td>
    <td class="actions"><button type="button" data-token="${esc(a.id)}">Issue token</button>
      <button type="button" data-link="${esc(a.id)}">Portal link</button>
      <a href="#/endpoints/new?app=${encodeURIComponent(a.id)}">Add endpoint</a></td></tr>`;
}

export function render(root) {
  root.innerHTML = skeleton();
  const $ = sel => root.querySelector(sel);
  let drawnFor = null;

  // What is shown once (a token, a link) stays until the next one.
  function show(html) {
    $("#app-shown").innerHTML = html;
    $("#app-shown").hidden = false;
  }

  $("#app-create").addEventListener("submit", act(async ev => {
    ev.preventDefault();
    const body = { id: $("#app-id").value.trim() };
    if ($("#app-name").value.trim()) body.name = $("#app-name").value.trim();
    const doc = await post("/v1/applications", body);
    $("#app-create").reset();
    show(`Created <b>${esc(doc.name)}</b> (${esc(doc.id)}).`);
    drawnFor = null;
    await refresh();
  }));

  $("#app-list").addEventListener("submit", act(async ev => {
    const form = ev.target.closest("form[data-quota]");
    if (!form) return;
    ev.preventDefault();
    const value = name => (form.elements[name].value === "" ? null : Number(form.elements[name].value));
    const doc = await patch(`/v1/applications/${encodeURIComponent(form.dataset.quota)}`,
      { max_endpoints: value("max_endpoints"), max_events_per_s: value("max_events_per_s") });
    show(`Quotas of ${esc(doc.id)}: ${doc.max_endpoints ?? "no limit"} endpoints, ${doc.max_events_per_s ?? "no limit"} events per second.`);
  }));

  $("#app-list").addEventListener("click", act(async ev => {
    const token = ev.target.closest("button[data-token]");
    if (token) {
      const doc = await post(`/v1/applications/${encodeURIComponent(token.dataset.token)}/tokens`, {});
      show(`API token for ${esc(doc.app || token.dataset.token)}, <b>shown only now</b>${doc.expires_at ? `, valid until ${esc(when(doc.expires_at))}` : ""}:
        <input readonly class="secret-value" id="app-token" value="${esc(doc.token)}" aria-label="API token">`);
      return;
    }
    const link = ev.target.closest("button[data-link]");
    if (link) {
      const doc = await post(`/v1/applications/${encodeURIComponent(link.dataset.link)}/portal-links`, {});
      show(`Portal sign-in link for ${esc(link.dataset.link)}: it works once, until ${esc(when(doc.expires_at))}.
        <input readonly class="secret-value" id="app-link-url" value="${esc(doc.url)}" aria-label="Portal link">
        <a id="app-link" href="${esc(doc.url)}" target="_blank" rel="noopener noreferrer">Open the portal</a>`);
    }
  }));

  async function refresh() {
    const apps = await get("/v1/applications");
    // Redrawn only when the list changes: a poll must not reset a quota being typed.
    const key = JSON.stringify(apps.map(a => [a.id, a.name, a.endpoints, a.max_endpoints, a.max_events_per_s]));
    if (key === drawnFor) return;
    drawnFor = key;
    $("#app-list").innerHTML = table(["application", "endpoints", "queued", "quotas: endpoints · events/s", ""],
      apps.map(row), "no applications");
  }
  return { refresh, every: 5000 };
}
