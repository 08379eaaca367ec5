// What every view shares: calls to /v1/ with the session cookie, the names
// people know endpoints by, and the formatting of times, durations and results.
//
// Signed in by an HttpOnly SameSite=Strict cookie, so no token lives in this
// page or in browser storage; a state change sends the CSRF token the server
// wrote into the page, which another site's page cannot read.
const csrf = document.querySelector('meta[name="csrf-token"]').content;

export class SignedOut extends Error {}

// Calls to /v1/ for a page whose signed-out visitor goes to `signIn`: the
// dashboard's /login, the portal's /portal (which says how to sign in).
export function client(signIn) {
  async function call(method, path, body, withCursor = false) {
    const init = { method, credentials: "same-origin", headers: {} };
    if (method !== "GET") init.headers["X-CSRF-Token"] = csrf;
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    if (r.status === 401) {
      location.replace(signIn);
      throw new SignedOut("signed out");
    }
    const doc = await r.json().catch(() => null);
    if (!r.ok) {
      const e = new Error(doc && doc.error ? doc.error : `HTTP ${r.status}`);
      e.status = r.status;
      throw e;
    }
    // A list paged by header (dead letters) says where its next page starts.
    if (withCursor) return { doc, next: r.headers.get("X-Next-Cursor") };
    return doc;
  }
  return {
    get: path => call("GET", path),
    // {doc, next}: a list and the ?cursor= of its next page (null: the last).
    getPage: path => call("GET", path, undefined, true),
    post: (path, body) => call("POST", path, body),
    patch: (path, body) => call("PATCH", path, body),
    del: (path, body) => call("DELETE", path, body),
    // Ends the session (a state change like any other: the CSRF token).
    signOut: async logoutPath => {
      await fetch(logoutPath, { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": csrf } });
      location.replace(signIn);
    },
  };
}

const dashboard = client("/login");
export const get = dashboard.get;
export const getPage = dashboard.getPage;
export const post = dashboard.post;
export const patch = dashboard.patch;
export const signOut = () => dashboard.signOut("/logout");

// ---------------------------------------------------------------- endpoints by name

let endpoints = new Map();

// Every view names endpoints; one list, reloaded with each refresh of the
// view that asks, keeps renamed or new endpoints current without a reload.
export async function loadEndpoints() {
  const list = await get("/v1/endpoints");
  endpoints = new Map(list.map(e => [e.id, e]));
  return list;
}

export const endpointById = id => endpoints.get(id);

// What people call an endpoint: its name, else its URL's host and path.
export function endpointName(e) {
  if (e.name) return e.name;
  try {
    const u = new URL(e.url);
    return u.host + (u.pathname === "/" ? "" : u.pathname);
  } catch {
    return e.url;
  }
}

export function label(id) {
  const e = endpoints.get(id);
  return e ? endpointName(e) : `deleted endpoint #${id}`;
}

export function endpointLink(id) {
  const e = endpoints.get(id);
  const title = e ? ` title="${esc(e.url)}"` : "";
  return `<a href="#/endpoints/${id}"${title}>${esc(label(id))}</a>`;
}

export function endpointOptions(selected, blank) {
  const opts = [...endpoints.values()].map(e =>
    `<option value="${e.id}"${e.id === selected ? " selected" : ""}>${esc(label(e.id))}</option>`);
  return (blank ? `<option value="">${esc(blank)}</option>` : "") + opts.join("");
}

// ---------------------------------------------------------------- formatting

export function esc(s) {
  return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export function num(v) {
  if (v === null || v === undefined) return "–";
  return Number.isInteger(v) ? v.toLocaleString() : v.toFixed(1);
}

export function ms(v) {
  if (v === null || v === undefined) return "–";
  return v >= 10000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v).toLocaleString()} ms`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 10) return `${Number(seconds.toFixed(1))} s`;
  const s = Math.round(seconds);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${Math.round(s / 86400)} days`;
}

// A full date and time, in the browser's zone: a time alone is ambiguous
// the moment a page is read the next day, or in a screenshot.
export function when(ts) {
  if (!ts) return "–";
  const t = new Date(ts);
  const p = n => String(n).padStart(2, "0");
  return `${t.getFullYear()}-${p(t.getMonth() + 1)}-${p(t.getDate())} ${p(t.getHours())}:${p(t.getMinutes())}:${p(t.getSeconds())}`;
}

// An <input type="datetime-local"> value (the browser's local time) as an
// instant for the API, or null when empty.
export function instant(local) {
  return local ? new Date(local).toISOString() : null;
}

// The share of 2xx answers over the last hour, or a dash without attempts.
export function successRate(h) {
  if (!h || h.success_rate_last_hour === null || h.success_rate_last_hour === undefined) return "–";
  return `${Math.round(h.success_rate_last_hour * 1000) / 10}% of ${num(h.attempts_last_hour)}`;
}

export function ago(ts) {
  if (!ts) return "–";
  const s = (Date.now() - new Date(ts).getTime()) / 1000;
  return s < 0 ? `in ${duration(-s)}` : `${duration(s)} ago`;
}

const STATUS = {
  pending: "pending", in_flight: "in flight", failed: "retry scheduled",
  delivered: "delivered", dead_letter: "dead letter", held: "held", cancelled: "cancelled",
};
export const statusPill = s => `<span class="pill st-${esc(s)}">${esc(STATUS[s] || s)}</span>`;

const STATES = { closed: "closed", open: "open", half_open: "half-open" };
export const breakerPill = s => `<span class="pill ${esc(s)}">${esc(STATES[s] || s)}</span>`;

// One attempt's outcome as people read it: the status line, or why there was none.
export function result(statusCode, error) {
  if (statusCode !== null && statusCode !== undefined) {
    return error && !error.startsWith("HTTP ") ? `HTTP ${statusCode}: ${error}` : `HTTP ${statusCode}`;
  }
  return error || "–";
}

// Attempts a delivery made before its last replay: a replay starts a fresh
// budget (attempt_count back to 0) and keeps the earlier attempts, so "1 of
// 3" alone would read as the only try.
export function earlierAttempts(d) {
  return d.attempts ? Math.max(0, d.attempts.length - d.attempt_count) : 0;
}

// "1 of 3", and since when it counts when the delivery was replayed.
export function attemptBudget(d) {
  const budget = `${num(d.attempt_count)} of ${num(d.max_attempts)}`;
  const earlier = earlierAttempts(d);
  return earlier ? `${budget} since it was replayed, after ${num(earlier)} earlier` : budget;
}

export function table(head, rows, empty) {
  const body = rows.length ? rows.join("") : `<tr><td colspan="${head.length}" class="quiet">${esc(empty)}</td></tr>`;
  return `<div class="scroll"><table><thead><tr>${head.map(h => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${body}</tbody></table></div>`;
}

// ---------------------------------------------------------------- errors

export function showError(e) {
  if (e instanceof SignedOut) return;
  document.getElementById("err").textContent = e.message;
}

// A click handler whose failure is shown in the header, not lost in the console.
export const act = fn => async ev => {
  try {
    await fn(ev);
  } catch (e) {
    showError(e);
  }
};

// An attempt's phases (SPEC "Traces and attempt details") as the segments
// of a bar: [class, share of the total in %, what it says], those that
// took time only. DNS, connecting, waiting for the first byte, reading the
// rest. The console's delivery page and the portal draw it alike.
export function timingParts(t) {
  if (!t || !t.total) return [];
  const dns = t.dns || 0, connect = t.connect || 0;
  const ttfb = t.ttfb === null || t.ttfb === undefined ? t.total : t.ttfb;
  return [["ph-dns", dns, "DNS"], ["ph-connect", connect, "connect"],
    ["ph-wait", Math.max(ttfb - dns - connect, 0), "first byte"], ["ph-read", Math.max(t.total - ttfb, 0), "body"]]
    .filter(([, v]) => v > 0)
    .map(([cls, v, label]) => [cls, (100 * v / t.total).toFixed(1), `${label} ${ms(v)}`]);
}
