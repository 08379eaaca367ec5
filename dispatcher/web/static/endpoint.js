// One endpoint's page (#/endpoints/ID): how fast it answers over time, when
// its breaker moved, what failed lately, and the switch to stop or resume it.
import { get, post, act, showError, loadEndpoints, label, esc, num, ms, duration, when, breakerPill, result, table } from "./api.js";
import { range, rangePicker, lineChart } from "./charts.js";

function skeleton(id) {
  return `
  <section class="wide">
    <div class="title-row"><h2 id="ep-name">endpoint #${id}</h2><span id="ep-breaker"></span>
      <span class="spacer"></span><span id="ep-state"></span>
      <a class="button" id="ep-edit" href="#/endpoints/${id}/edit">Edit</a>
      <a class="button" id="ep-deliveries" href="#/deliveries?endpoint_id=${id}">Deliveries</a>
      <button type="button" id="ep-disable" hidden>Disable</button>
      <button type="button" id="ep-enable" hidden>Enable</button></div>
    <div class="dim url" id="ep-url"></div><p id="ep-description" class="wrap"></p>
    <dl class="settings" id="ep-settings"></dl>
  </section>
  <section class="wide charts-head"><div class="range" id="range"></div></section>
  <section>
    <h2>Response time <small>(<span class="c-ok">p50</span> / <span class="c-warn">p95</span> / <span class="c-bad">p99</span>)</small></h2>
    <svg id="latency" class="chart" role="img" aria-label="response time percentiles over time"></svg>
  </section>
  <section>
    <h2>Attempts per bucket <small>(<span class="c-accent">all</span> / <span class="c-bad">failed</span>)</small></h2>
    <svg id="attempts" class="chart" role="img" aria-label="attempts and failures over time"></svg>
  </section>
  <section class="wide"><h2>Breaker transitions</h2><div id="transitions"></div></section>
  <section class="wide"><h2>Recent failed attempts</h2><div id="failures"></div></section>`;
}

function settings(e) {
  const rows = [
    ["event types", e.event_types.includes("*") ? "every type" : e.event_types.join(", ")],
    ["timeout", ms(e.timeout_ms)],
    ["attempts", `up to ${num(e.max_attempts)}`],
    ["retry backoff", `up to ${duration(e.retry_base_ms / 1000)}, doubling to ${duration(e.retry_cap_ms / 1000)}`],
    ["breaker", `opens after ${num(e.failure_threshold)} failures in a row, cools down ${duration(e.cooldown_s)}`],
    ["in flight", `at most ${num(e.max_in_flight)}`],
    ["rate", e.rate_per_s ? `${num(e.rate_per_s)}/s, burst ${num(e.burst ?? e.rate_per_s)}` : "unlimited"],
    ["macros", `${e.macro_style} style${e.value_map ? `, value map ${JSON.stringify(e.value_map)}` : ""}`],
    ["auto-disable", e.disable_after ? `after ${num(e.disable_after)} failures within ${duration(e.disable_within_s)}` : "off"],
  ];
  return rows.map(([k, v]) => `<div><dt>${esc(k)}</dt><dd>${esc(v)}</dd></div>`).join("");
}

function transitionRow(t) {
  const cooldown = t.to_state === "open" && t.cooldown_seconds ? duration(t.cooldown_seconds) : "";
  return `<tr><td>${esc(when(t.at))}</td><td>${esc(t.from_state.replace("_", "-"))} → ${esc(t.to_state.replace("_", "-"))}</td><td>${esc(cooldown)}</td></tr>`;
}

function failureRow(f) {
  const event = f.event_id
    ? `<a href="#/events/${encodeURIComponent(f.event_id)}">${esc(f.event_id)}</a>`
    : '<span class="dim">no longer stored</span>';
  return `<tr><td>${esc(when(f.at))}</td><td>${event}</td><td>${esc(f.event_type ?? "–")}</td>
    <td class="wrap">${esc(result(f.status_code, f.error))}</td><td>${ms(f.response_ms)}</td></tr>`;
}

export function render(root, idText) {
  const id = Number(idText);
  root.innerHTML = skeleton(id);
  const $ = sel => root.querySelector(sel);
  rangePicker($("#range"), () => refresh().catch(showError));

  async function refresh() {
    const [, endpoint, health, activity] = await Promise.all([
      loadEndpoints(), get(`/v1/endpoints/${id}`), get("/v1/endpoints/health"),
      get(`/v1/endpoints/${id}/activity?minutes=${range.minutes}`),
    ]);
    const h = health.find(r => r.endpoint_id === id);
    $("#ep-name").textContent = label(id);
    // A broker destination says which (its password comes masked).
    $("#ep-url").textContent = endpoint.kind && endpoint.kind !== "http"
      ? `${endpoint.kind} · ${endpoint.url}` : endpoint.url;
    $("#ep-description").textContent = endpoint.description || "";
    $("#ep-breaker").innerHTML = h ? breakerPill(h.state) : "";
    $("#ep-state").innerHTML = endpoint.enabled
      ? "enabled"
      : `<span class="warn">disabled${endpoint.disabled_reason ? `: ${esc(endpoint.disabled_reason)}` : ""}</span>`;
    $("#ep-disable").hidden = !endpoint.enabled;
    $("#ep-enable").hidden = endpoint.enabled;
    $("#ep-settings").innerHTML = settings(endpoint);
    const pts = activity.latency;
    lineChart($("#latency"), [
      { values: pts.map(p => p.p50_ms), cls: "s-ok" },
      { values: pts.map(p => p.p95_ms), cls: "s-warn" },
      { values: pts.map(p => p.p99_ms), cls: "s-bad" },
    ], { bucketS: activity.bucket_s, unit: " ms" });
    lineChart($("#attempts"), [
      { values: pts.map(p => p.attempts), cls: "s-accent" },
      { values: pts.map(p => p.failures), cls: "s-bad" },
    ], { bucketS: activity.bucket_s });
    $("#transitions").innerHTML = table(["when", "breaker", "cooldown"], activity.transitions.map(transitionRow),
      "the breaker has not moved");
    $("#failures").innerHTML = table(["when", "event", "type", "result", "response"],
      activity.failures.map(failureRow), "no failed attempts in this range");
  }

  const toggle = action => act(async () => {
    await post(`/v1/endpoints/${id}/${action}`);
    await refresh();
  });
  $("#ep-disable").addEventListener("click", toggle("disable"));
  $("#ep-enable").addEventListener("click", toggle("enable"));
  // Percentiles over a day rescan a day of samples: wide ranges poll slower.
  return { refresh, every: () => (range.minutes <= 5 ? 3000 : range.minutes <= 30 ? 10000 : 30000) };
}
