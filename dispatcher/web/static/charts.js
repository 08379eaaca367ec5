// Plain SVG line charts and the time-range picker they share. Colours are
// classes (dashboard.css), never style attributes: the CSP refuses inline style.
import { esc, num } from "./api.js";

export const RANGES = [[1, "1 min"], [5, "5 min"], [30, "30 min"], [180, "3 h"], [1440, "24 h"]];

// One choice for every chart: the endpoint pages show the span the overview
// was showing. Five minutes by default: a burst of a few seconds (the demo's)
// still spans several one-second buckets there.
export const range = { minutes: 5 };

// Buttons choosing the minutes the charts cover; `onPick()` after a click.
export function rangePicker(el, onPick) {
  const draw = () => {
    el.innerHTML = RANGES.map(([m, text]) =>
      `<button type="button" data-minutes="${m}" aria-pressed="${m === range.minutes}">${text}</button>`).join("");
  };
  draw();
  el.addEventListener("click", ev => {
    const b = ev.target.closest("button[data-minutes]");
    if (!b) return;
    range.minutes = Number(b.dataset.minutes);
    draw();
    onPick();
  });
}

function spanText(seconds) {
  return seconds >= 3600 ? `${Math.round(seconds / 3600)} h ago` : `${Math.round(seconds / 60)} min ago`;
}

// series: [{ values: [number|null], cls: "s-ok" }] over equal buckets, oldest
// first. A null is a bucket without data: the line breaks there rather than
// pretending it was zero.
export function lineChart(svg, series, { bucketS, unit = "" }) {
  const w = Math.max(200, svg.clientWidth || 400), h = Math.max(100, svg.clientHeight || 140);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const left = 64, right = 8, top = 8, bottom = 18;
  const all = series.flatMap(s => s.values).filter(v => v !== null && v !== undefined);
  const max = Math.max(1, ...all);
  const n = Math.max(2, ...series.map(s => s.values.length));
  const x = i => left + (i / (n - 1)) * (w - left - right);
  const y = v => top + (1 - v / max) * (h - top - bottom);
  let out = "";
  for (const frac of [0, 0.5, 1]) {
    const v = max * frac;
    out += `<line class="grid" x1="${left}" x2="${w - right}" y1="${y(v)}" y2="${y(v)}"/>`;
    out += `<text class="axis" x="${left - 4}" y="${y(v) + 4}" text-anchor="end">${esc(num(frac === 0.5 ? Math.round(v) : v))}${unit}</text>`;
  }
  out += `<text class="axis" x="${left}" y="${h - 4}">${spanText(n * bucketS)}</text>`;
  out += `<text class="axis" x="${w - right}" y="${h - 4}" text-anchor="end">now</text>`;
  for (const { values, cls } of series) {
    let run = [];
    const flush = () => {
      if (run.length === 1) out += `<circle class="${cls}" cx="${run[0][0]}" cy="${run[0][1]}" r="2"/>`;
      else if (run.length > 1) out += `<polyline class="${cls}" points="${run.map(p => p.join(",")).join(" ")}"/>`;
      run = [];
    };
    values.forEach((v, i) => {
      if (v === null || v === undefined) flush();
      else run.push([x(i).toFixed(1), y(v).toFixed(1)]);
    });
    flush();
  }
  svg.innerHTML = out;
}
