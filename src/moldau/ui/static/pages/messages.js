// #/messages/<topic>: browse records (from an offset, a time, the beginning, or
// the end: the newest first, over all partitions; one partition or all; a text
// filter), shown as text, JSON or hex; and produce one record.
import { getJSON, sendJSON } from "../api.js";
import { el, link, table } from "../dom.js";
import { showError } from "../app.js";

const decoder = new TextDecoder("utf-8");

function bytesOf(b64) {
  return Uint8Array.from(atob(b64), c => c.charCodeAt(0));
}

export function show(b64, format) {
  if (b64 === null) return el("span", { class: "muted" }, "null");
  const data = bytesOf(b64);
  if (format === "hex") return el("pre", {}, Array.from(data, b => b.toString(16).padStart(2, "0")).join(" "));
  const text = decoder.decode(data);
  if (format === "json") {
    try { return el("pre", {}, JSON.stringify(JSON.parse(text), null, 2)); }
    catch { return el("pre", { title: "not JSON: shown as text" }, text); }
  }
  return el("pre", {}, text);
}

// A record's time as the Time field takes it (local), to the millisecond; UTC
// and the timestamp's type in its tooltip.
function localTime(ms) {
  const d = new Date(ms);
  return new Date(ms - d.getTimezoneOffset() * 60000).toISOString().replace("T", " ").replace("Z", "");
}

function field(label, input) { return el("label", {}, label, input); }

// What a browse read, for the status line: how many, in which order, from where.
function summary(r) {
  const read = r.partitions.filter(p => p.read), idle = r.partitions.filter(p => !p.read);
  const where = read.map(p => `partition ${p.partition} (offsets ${p.from}–${p.to})`).join(", ");
  return `${r.records.length} record(s), ${r.order}; ${r.scanned} read` +
    (where ? ` from ${where}` : "") +
    (idle.length ? `; nothing to read in partition ${idle.map(p => p.partition).join(", ")}` : "") +
    (r.complete ? "" : " (stopped early: the scan's limit or time)");
}

export function render(main, [topic]) {
  const t = encodeURIComponent(topic);
  const partition = el("select", { name: "partition" }, el("option", { value: "all" }, "all"));
  const from = el("select", { name: "from" }, [["end", "the end (newest first)"], ["beginning", "the beginning"], ["offset", "an offset"], ["timestamp", "a time"]].map(([m, text]) => el("option", { value: m }, text)));
  const offset = el("input", { name: "offset", type: "number", min: 0, value: 0, style: "width: 8em" });
  const time = el("input", { name: "timestamp", type: "datetime-local", step: 1 });
  const limit = el("input", { name: "limit", type: "number", min: 1, max: 500, value: 50, style: "width: 5em" });
  const filter = el("input", { name: "filter", placeholder: "text in key, value or headers" });
  const format = el("select", { name: "format" }, ["text", "json", "hex"].map(f => el("option", { value: f }, f)));
  const status = el("p", { class: "note", id: "browse-status" });
  const results = el("div", { id: "records" });
  let records = [];

  const draw = () => results.replaceChildren(table([
    { title: "Partition", value: r => r.partition, num: true },
    { title: "Offset", value: r => r.offset, num: true },
    { title: "Time (local)", value: r => (r.timestamp === null ? "–" : el("span", { title: `${new Date(r.timestamp).toISOString()} (${r.timestampType})` }, localTime(r.timestamp))) },
    { title: "Key", value: r => show(r.key, format.value) },
    { title: "Value", value: r => [show(r.value, format.value), r.truncated ? el("span", { class: "note" }, " (cut)") : null] },
    { title: "Headers", value: r => r.headers.map(([k, v]) => el("div", { class: "header" }, `${k}: `, v === null ? "null" : decoder.decode(bytesOf(v)))) },
  ], records, {}, "No records in this window."));

  async function load() {
    const q = new URLSearchParams({ partition: partition.value, from: from.value, limit: limit.value, filter: filter.value });
    if (from.value === "offset") q.set("offset", offset.value);
    if (from.value === "timestamp") q.set("timestamp", String(new Date(time.value).getTime()));
    try {
      const r = await getJSON(`/api/topics/${t}/messages?${q}`);
      records = r.records;
      status.textContent = summary(r);
      draw();
      showError("");
    } catch (e) { records = []; draw(); status.textContent = ""; showError(e.message); }
  }

  const offsetField = field("Offset", offset), timeField = field("Time", time);
  const browse = el("form", { class: "inline", id: "browse" },
    field("Partition", partition), field("From", from), offsetField, timeField,
    field("Records", limit), field("Filter", filter), field("Show as", format),
    el("button", { type: "submit" }, "Browse"));
  browse.addEventListener("submit", e => { e.preventDefault(); load(); });
  // Only the start the chosen mode needs is shown.
  const showStart = () => {
    offsetField.hidden = from.value !== "offset";
    timeField.hidden = from.value !== "timestamp";
  };
  from.addEventListener("change", showStart);
  showStart();
  format.addEventListener("change", draw);

  const pKey = el("input", { name: "key", placeholder: "key" });
  const pValue = el("textarea", { name: "value", rows: 1, cols: 40, placeholder: "value" });
  const pHeaders = el("input", { name: "headers", placeholder: "name=value, ..." });
  const pPartition = el("input", { name: "partition", type: "number", min: 0, placeholder: "any", style: "width: 5em" });
  const produced = el("span", { class: "note", id: "produced" });
  const produce = el("form", { class: "inline", id: "produce" },
    field("Key", pKey), field("Value", pValue), field("Headers", pHeaders), field("Partition", pPartition),
    el("button", { type: "submit" }, "Produce"), produced);
  produce.addEventListener("submit", async e => {
    e.preventDefault();
    const headers = pHeaders.value.split(",").map(s => s.trim()).filter(Boolean).map(s => {
      const i = s.indexOf("="); return i < 0 ? [s, ""] : [s.slice(0, i), s.slice(i + 1)];
    });
    try {
      const r = await sendJSON("POST", `/api/topics/${t}/messages`, {
        key: pKey.value || null, value: pValue.value, headers, partition: pPartition.value === "" ? null : Number(pPartition.value),
      });
      produced.textContent = `written to partition ${r.partition} at offset ${r.offset}`;
      showError("");
    } catch (err) { showError(err.message); }
  });

  main.append(el("h1", {}, "Messages in ", link(`#/topic/${t}`, topic)), browse, status, results,
    el("h2", {}, "Produce a record"), produce);
  getJSON(`/api/topics/${t}`).then(info => {
    for (const p of info.partitions) partition.append(el("option", { value: p.partition }, p.partition));
    return load();
  }).catch(e => showError(e.message));
}
