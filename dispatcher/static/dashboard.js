"use strict";
// Signed in by a session cookie (HttpOnly, SameSite=Strict): no token lives
// in this page or in browser storage. State changes send the CSRF token the
// server put in the page.
const csrf = document.querySelector('meta[name="csrf-token"]').content;

async function get(path) {
  const r = await fetch(path, { credentials: "same-origin" });
  if (r.status === 401) { location.assign("/login"); throw new Error("signed out"); }
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

async function signOut(event) {
  event.preventDefault();
  await fetch("/logout", { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": csrf } });
  location.assign("/login");
}
document.getElementById("signout").addEventListener("submit", signOut);
const fmt = v => v === null || v === undefined ? "–" : (typeof v === "number" ? (Number.isInteger(v) ? v.toLocaleString() : v.toFixed(1)) : String(v));
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c])); }

function spark(id, series) {
  const svg = document.getElementById(id);
  const max = Math.max(1, ...series.flatMap(s => s.values));
  let html = "";
  for (const { values, color } of series) {
    const n = values.length;
    if (n < 2) continue;
    const pts = values.map((v, i) => `${(i / (n - 1)) * 400},${118 - (v / max) * 104}`).join(" ");
    html += `<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts}"/>`;
  }
  svg.innerHTML = html + `<text x="4" y="12" fill="#8b98a5" font-size="11">max ${fmt(max)}</text>`;
}

async function refresh() {
  try {
    const [h, eps, alerts, dlq, tl] = await Promise.all([
      get("/v1/health"), get("/v1/endpoints/health"), get("/v1/alerts"), get("/v1/dead-letters/analyze"),
      get("/v1/timeline?minutes=15"),
    ]);
    const tiles = [["pending", h.pending], ["awaiting retry", h.awaiting_retry], ["in flight", h.in_flight],
      ["dead letters", h.dead_letter], ["delivered (1 h)", h.delivered_last_hour], ["failed (1 h)", h.failed_last_hour],
      ["avg ms (1 h)", h.avg_delivery_ms_last_hour], ["oldest pending", h.oldest_pending ? new Date(h.oldest_pending).toLocaleTimeString() : "–"]];
    document.getElementById("tiles").innerHTML = tiles.map(([k, v]) => `<div class="tile"><b>${fmt(v)}</b><small>${k}</small></div>`).join("");
    // Depth over time, walked back from the current depth with each bucket's in- and outflow.
    const pts = tl.points, perS = v => v / tl.bucket_s, depth = [];
    let d = h.pending + h.awaiting_retry + h.in_flight;
    for (let i = pts.length - 1; i >= 0; i--) { depth.unshift(Math.max(0, d)); d += pts[i].delivered + pts[i].dead - pts[i].enqueued; }
    spark("depth", [{ values: depth, color: "#58a6ff" }]);
    spark("rate", [
      { values: pts.map(p => perS(p.enqueued)), color: "#58a6ff" },
      { values: pts.map(p => perS(p.dead)), color: "#f85149" },
      { values: pts.map(p => perS(p.delivered)), color: "#3fb950" },
    ]);
    document.querySelector("#endpoints tbody").innerHTML = eps.map(e => `<tr data-endpoint="${e.endpoint_id}">
      <td>${e.endpoint_id}</td><td class="url">${esc(e.url)}</td><td><span class="pill ${e.state}">${e.state}</span></td>
      <td>${fmt(e.consecutive_failures)}</td><td>${fmt(e.p50_ms)}</td><td>${fmt(e.p95_ms)}</td><td>${fmt(e.p99_ms)}</td>
      <td>${fmt(e.sample_count)}</td><td>${e.enabled ? "yes" : "no"}</td></tr>`).join("");
    document.querySelector("#alerts tbody").innerHTML = Object.entries(alerts).map(([k, a]) => `<tr>
      <td>${esc(k)}</td><td class="${a.firing ? "firing" : "quiet"}">${a.firing ? "FIRING" : "ok"}</td>
      <td>${esc(JSON.stringify(a.value))}</td><td>threshold ${esc(JSON.stringify(a.threshold))}</td></tr>`).join("");
    document.querySelector("#dlq tbody").innerHTML = dlq.length ? dlq.map(d => `<tr><td>${d.endpoint_id}</td><td>${fmt(d.dead)}</td>
      <td>${fmt(d.primary_status_code)}</td><td>${esc(d.pattern)}</td><td class="wrap">${esc(d.suggested_action)}</td></tr>`).join("")
      : `<tr><td colspan="5" class="quiet">no dead letters</td></tr>`;
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.getElementById("err").textContent = "";
  } catch (e) {
    document.getElementById("err").textContent = e.message;
  }
}
refresh(); setInterval(refresh, 2000);
