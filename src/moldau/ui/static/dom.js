// Small DOM helpers: el("td", {class: "num"}, "3"), a table from rows, formats.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c !== undefined && c !== null) node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

// columns: [{title, value: row => text|Node, num: bool}]; `empty`: what to say
// under the headings when there are no rows.
export function table(columns, rows, attrs = {}, empty = null) {
  const t = el("table", attrs,
    el("thead", {}, el("tr", {}, columns.map(c => el("th", { class: c.num ? "num" : null }, c.title)))),
    el("tbody", {}, rows.map(r => el("tr", {},
      columns.map(c => el("td", { class: c.num ? "num" : null }, c.value(r)))))));
  return rows.length || !empty ? t : el("div", {}, t, el("p", { class: "empty" }, empty));
}

export function card(label, value, cls) {
  return el("div", { class: "card" }, el("div", { class: "label" }, label),
    el("div", { class: `value ${cls || ""}` }, value));
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function rate(n, unit = "/s") {
  if (n === null || n === undefined) return "–";
  return `${n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString()}${unit}`;
}

export function link(href, text) { return el("a", { href }, text); }

// What an empty throughput chart says: bytes out needs the metrics endpoints.
export function noThroughput(source, otherwise) {
  return name => (source !== "metrics" && name.endsWith("bytes_out") ? "needs the brokers' metrics endpoints" : otherwise);
}

// Where the throughput numbers come from, said under the charts.
export function throughputSource(source) {
  return source === "metrics"
    ? "From the brokers' metrics endpoints (Kafka's BrokerTopicMetrics)."
    : "From the protocol: bytes in as the growth of the leaders' log sizes (DescribeLogDirs), messages as the growth of the high watermarks (ListOffsets); bytes out needs the brokers' metrics endpoints (--metrics-url).";
}
