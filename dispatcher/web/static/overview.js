// The front page: is the pipeline healthy, what is firing, which endpoint
// needs a look. Every endpoint is named and links to its own page.
import { get, post, act, showError, loadEndpoints, endpointById, endpointLink, esc, num, ms, duration, when, breakerPill, result, successRate, table } from "./api.js";
import { range, rangePicker, lineChart } from "./charts.js";

const SKELETON = `
  <section class="wide"><h2>Pipeline</h2><div class="tiles" id="tiles"></div></section>
  <section class="wide"><h2>Alerts</h2><ul class="alerts" id="alerts"></ul></section>
  <section class="wide charts-head"><div class="range" id="range"></div></section>
  <section>
    <h2>Queue depth <small>(pending + retrying + in flight)</small></h2>
    <svg id="depth" class="chart" role="img" aria-label="queue depth over time"></svg>
  </section>
  <section>
    <h2>Throughput per second <small>(<span class="c-ok">delivered</span> / <span class="c-accent">enqueued</span> / <span class="c-bad">dead</span>)</small></h2>
    <svg id="rate" class="chart" role="img" aria-label="deliveries per second over time"></svg>
  </section>
  <section class="wide"><h2>Endpoints</h2><div id="endpoints"></div></section>
  <section class="wide"><h2>Dead-letter patterns, last 24 h</h2><p id="dlq-message" class="note" role="status" hidden></p><div id="dlq"></div></section>`;

// Each alert as a sentence an operator can act on, not a JSON value.
const ALERTS = {
  dead_letters_rising: a => a.firing
    ? `Dead letters rising: ${num(a.value)} in the last hour (${num(a.threshold)} the hour before). <a href="#/dead-letters">See them</a>`
    : `Dead letters steady: ${num(a.value)} in the last hour, ${num(a.threshold)} the hour before.`,
  oldest_pending: a => {
    if (a.value === null) return "Nothing is waiting to be delivered.";
    return a.firing
      ? `Oldest undelivered event is ${duration(a.value)} old, longer than the ${duration(a.threshold)} a retry may wait.`
      : `Oldest undelivered event is ${duration(a.value)} old (alert after ${duration(a.threshold)}).`;
  },
  slow_endpoints: a => a.firing
    ? `Slow endpoints (p95 over ${num(a.threshold)} ms): ${a.value.map(endpointLink).join(", ")}.`
    : `No endpoint's p95 is over ${num(a.threshold)} ms.`,
};

function alertLine(key, a) {
  const text = ALERTS[key] ? ALERTS[key](a) : `${esc(key.replaceAll("_", " "))}: ${esc(JSON.stringify(a.value))}`;
  return `<li class="${a.firing ? "firing" : "quiet"}" data-alert="${esc(key)}"><b>${a.firing ? "Firing" : "OK"}</b> ${text}</li>`;
}

function tiles(h) {
  const list = [
    ["pending", num(h.pending)], ["retry scheduled", num(h.awaiting_retry)], ["in flight", num(h.in_flight)],
    ["dead letters", num(h.dead_letter)], ["delivered, last hour", num(h.delivered_last_hour)],
    ["failed, last hour", num(h.failed_last_hour)], ["average response, last hour", ms(h.avg_delivery_ms_last_hour)],
    ["oldest undelivered", h.oldest_pending ? when(h.oldest_pending) : "none"],
    ["workers live", num(h.workers_live)],
  ];
  if (h.workers_silent) list.push(["workers silent", num(h.workers_silent)]);
  return list.map(([k, v]) => `<div class="tile"><b>${esc(v)}</b><small>${esc(k)}</small></div>`).join("");
}

function endpointRow(e) {
  return `<tr data-endpoint="${e.endpoint_id}">
    <td>${endpointLink(e.endpoint_id)}<div class="dim url">${esc(brokerKind(e.url))}${esc(e.url)}</div></td>
    <td>${esc(e.app)}</td>
    <td>${breakerPill(e.state)}</td>
    <td>${num(e.consecutive_failures)} of ${num(e.failure_threshold)}</td>
    <td class="${e.success_rate_last_hour !== null && e.success_rate_last_hour < 0.95 ? "warn" : ""}">${esc(successRate(e))}</td>
    <td>${ms(e.p50_ms)}</td><td>${ms(e.p95_ms)}</td><td>${ms(e.p99_ms)}</td>
    <td>${num(e.sample_count)}</td>
    <td>${e.enabled ? "enabled" : '<span class="warn">disabled</span>'}</td></tr>`;
}

// The advice of `dlq analyze` as buttons that do it: fix the endpoint (its
// editor), resume it if it is disabled, then replay what died meanwhile.
function actions(d) {
  const e = endpointById(d.endpoint_id);
  if (!e) return "";
  const enable = e.enabled ? "" : `<button type="button" data-enable="${d.endpoint_id}">Enable</button>`;
  return `<a class="button" href="#/endpoints/${d.endpoint_id}/edit" data-edit="${d.endpoint_id}">Edit endpoint</a>${enable}
    <button type="button" data-replay-endpoint="${d.endpoint_id}" data-since="${esc(d.first_at)}">Replay ${num(d.dead)}</button>`;
}

function dlqRow(d) {
  return `<tr data-dlq="${d.endpoint_id}"><td>${endpointLink(d.endpoint_id)}</td><td>${esc(d.app || "")}</td>
    <td><a href="#/dead-letters?endpoint=${d.endpoint_id}">${num(d.dead)}</a></td>
    <td class="wrap">${esc(result(d.primary_status_code, d.primary_error))}</td>
    <td>${esc(d.pattern)}</td><td class="wrap">${esc(d.suggested_action)}</td><td class="actions">${actions(d)}</td></tr>`;
}

export function render(root) {
  root.innerHTML = SKELETON;
  rangePicker(root.querySelector("#range"), () => refresh().catch(showError));
  async function refresh() {
    const [h, eps, alerts, dlq, tl] = await Promise.all([
      get("/v1/health"), get("/v1/endpoints/health"), get("/v1/alerts"), get("/v1/dead-letters/analyze"),
      get(`/v1/timeline?minutes=${range.minutes}`), loadEndpoints(),
    ]);
    root.querySelector("#tiles").innerHTML = tiles(h);
    root.querySelector("#alerts").innerHTML = Object.entries(alerts).map(([k, a]) => alertLine(k, a)).join("");
    const pts = tl.points, perS = v => v / tl.bucket_s;
    lineChart(root.querySelector("#depth"), [{ values: pts.map(p => p.depth), cls: "s-accent" }], { bucketS: tl.bucket_s });
    lineChart(root.querySelector("#rate"), [
      { values: pts.map(p => perS(p.enqueued)), cls: "s-accent" },
      { values: pts.map(p => perS(p.dead)), cls: "s-bad" },
      { values: pts.map(p => perS(p.delivered)), cls: "s-ok" },
    ], { bucketS: tl.bucket_s });
    root.querySelector("#endpoints").innerHTML = table(
      ["endpoint", "application", "breaker", "failures in a row", "success, last hour", "p50", "p95", "p99", "samples", "state"],
      eps.map(endpointRow), "no endpoints yet: add one (Add endpoint, above)");
    root.querySelector("#dlq").innerHTML = table(
      ["endpoint", "application", "dead", "most common result", "pattern", "suggested action", ""], dlq.map(dlqRow), "no dead letters");
  }
  root.querySelector("#dlq").addEventListener("click", act(async ev => {
    const enable = ev.target.closest("button[data-enable]");
    const replay = ev.target.closest("button[data-replay-endpoint]");
    const say = text => { const m = root.querySelector("#dlq-message"); m.textContent = text; m.hidden = false; };
    if (enable) {
      enable.disabled = true;
      await post(`/v1/endpoints/${enable.dataset.enable}/enable`);
      say("Enabled: its queued deliveries are sent again.");
    } else if (replay) {
      replay.disabled = true;
      const done = await post("/v1/dead-letters/replay",
        { endpoint_id: Number(replay.dataset.replayEndpoint), since: replay.dataset.since });
      say(`Requeued ${num(done.requeued)} ${done.requeued === 1 ? "delivery" : "deliveries"}: they are sent again from now.`);
    } else return;
    await refresh();
  }));
  return { refresh, every: 2000 };
}

// The kind a URL's scheme names (SPEC "Destinations"), shown before a broker's URL.
function brokerKind(url) {
  const kinds = { amqp: "amqp", amqps: "amqp", nats: "nats", tls: "nats", redis: "redis", rediss: "redis" };
  const kind = kinds[String(url).split(":")[0].toLowerCase()];
  return kind ? `${kind} · ` : "";
}
