// A small SVG line chart: lineChart(el, {series: [{name, points: [[t_ms, v], ...]}], unit}).
// Called again with new points it redraws in place.
const COLORS = ["#2463eb", "#16803c", "#b45309", "#9333ea", "#c2261d"];
const W = 360, H = 140, PAD = { l: 48, r: 8, t: 8, b: 18 };
const NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, text) {
  const n = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  if (text !== undefined) n.textContent = text;
  return n;
}

function short(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return a >= 10 || v === 0 ? `${Math.round(v)}` : v.toFixed(1);
}

// The axis' top: the maximum rounded up to 1, 2 or 5 times a power of ten, so
// that the grid lines read as round numbers.
function niceCeiling(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  return p * ([1, 2, 5].find(m => v <= m * p) ?? 10);
}

export function lineChart(el, { series, unit = "", empty = "no data yet" }) {
  const all = series.flatMap(s => s.points);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  // At least the last minute across; at least 1 up (a flat zero line sits at the bottom).
  const t1 = Math.max(...all.map(p => p[0]), Date.now());
  const t0 = Math.min(...all.map(p => p[0]), t1 - 60000);
  const vmax = niceCeiling(Math.max(1, ...all.map(p => p[1])));
  const x = t => PAD.l + (t - t0) / (t1 - t0) * (W - PAD.l - PAD.r);
  const y = v => H - PAD.b - v / vmax * (H - PAD.t - PAD.b);
  for (const f of [0, 0.5, 1]) {
    svg.append(svgEl("line", { x1: PAD.l, x2: W - PAD.r, y1: y(vmax * f), y2: y(vmax * f), stroke: "#e2e6ec" }));
    svg.append(svgEl("text", { x: PAD.l - 4, y: y(vmax * f) + 4, "text-anchor": "end", "font-size": 10, fill: "#687385" },
      short(vmax * f) + unit));
  }
  for (const [t, anchor, at] of [[t0, "start", PAD.l], [t1, "end", W - PAD.r]]) {
    svg.append(svgEl("text", { x: at, y: H - 4, "text-anchor": anchor, "font-size": 10, fill: "#687385" },
      new Date(t).toLocaleTimeString()));
  }
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
    svg.append(svgEl("path", { d, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 1.5 }));
  });
  if (!all.length) {
    svg.append(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", "font-size": 12, fill: "#687385" }, empty));
  }
  el.replaceChildren(svg);
}

// chartGrid([[name, title, unit], ...]): a row of titled charts; update(series,
// empty) redraws each from the series of its name; `empty` (a text, or a function
// of the name) says why a chart has no line.
export function chartGrid(defs) {
  const grid = document.createElement("div");
  grid.className = "charts";
  const bodies = defs.map(([, title]) => {
    const chart = document.createElement("div"), head = document.createElement("div");
    const body = document.createElement("div");
    chart.className = "chart"; head.className = "title"; body.className = "chart-body";
    head.textContent = title;
    chart.append(head, body);
    grid.append(chart);
    return body;
  });
  function update(series, empty) {
    const byName = Object.fromEntries(series.map(s => [s.name, s]));
    defs.forEach(([name, , unit], i) =>
      lineChart(bodies[i], { series: [byName[name] || { name, points: [] }], unit,
        empty: typeof empty === "function" ? empty(name) : empty }));
  }
  return [grid, update];
}
