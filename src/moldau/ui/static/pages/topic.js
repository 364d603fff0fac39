// #/topic/<name>: a summary and the topic's live throughput (kept by the
// server: a page opened later shows the last minutes); each partition's leader,
// replicas, ISR, offsets and size; the topic's configs with their source, editable.
import { getJSON, sendJSON } from "../api.js";
import { chartGrid } from "../chart.js";
import { bytes, card, el, link, noThroughput, rate, table, throughputSource } from "../dom.js";
import { showError } from "../app.js";
import { poll } from "../poll.js";

function configForm(name, refresh) {
  const key = el("input", { name: "key", placeholder: "retention.ms" });
  const value = el("input", { name: "value", placeholder: "value" });
  const form = el("form", { class: "inline", id: "alter-config" },
    el("label", {}, "Config", key), el("label", {}, "Value", value),
    el("button", { type: "submit" }, "Set"),
    el("button", { type: "button", class: "secondary", onclick: () => change({ delete: [key.value.trim()] }) }, "Reset to default"));
  async function change(body) {
    try { await sendJSON("PUT", `/api/topics/${encodeURIComponent(name)}/configs`, body); await refresh(); }
    catch (err) { showError(err.message); }
  }
  form.addEventListener("submit", e => { e.preventDefault(); change({ set: { [key.value.trim()]: value.value } }); });
  return [form, (k, v) => { key.value = k; value.value = v ?? ""; value.focus(); }];
}

export function render(main, [name]) {
  const head = el("p", {}, link(`#/messages/${encodeURIComponent(name)}`, "Browse messages"));
  const cards = el("div", { class: "cards", id: "summary" });
  const source = el("p", { class: "note" });
  const [charts, drawCharts] = chartGrid([
    [`topic.${name}.messages_in`, "Messages in per second", ""],
    [`topic.${name}.bytes_in`, "Bytes in per second", "B"],
    [`topic.${name}.bytes_out`, "Bytes out per second", "B"],
  ]);
  charts.id = "topic-charts";
  const parts = el("div"), configs = el("div");
  async function refresh() {
    const t = await getJSON(`/api/topics/${encodeURIComponent(name)}`);
    const lagging = p => p.isr.length < p.replicas.length;
    const under = t.partitions.filter(lagging).length;
    const size = t.partitions.reduce((sum, p) => sum + (p.size ?? 0), 0);
    cards.replaceChildren(
      card("Partitions", t.partitions.length),
      card("Replication factor", Math.max(0, ...t.partitions.map(p => p.replicas.length))),
      card("Under-replicated", under, under ? "warn" : "ok"),
      card("Size", bytes(size)),
      card("Messages in", rate(t.throughput.messagesPerSec)));
    source.textContent = throughputSource(t.throughput.source);
    drawCharts(t.throughput.series, noThroughput(t.throughput.source, "no records since the console started"));
    parts.replaceChildren(table([
      { title: "Partition", value: p => p.partition, num: true },
      { title: "Leader", value: p => el("span", { class: p.leader < 0 ? "bad" : "" }, p.leader < 0 ? "none" : p.leader), num: true },
      { title: "Replicas", value: p => p.replicas.join(", ") },
      { title: "ISR", value: p => el("span", { class: lagging(p) ? "warn" : "" }, p.isr.join(", ")) },
      { title: "Log start", value: p => p.logStart ?? "–", num: true },
      { title: "High watermark", value: p => p.highWatermark ?? "–", num: true },
      { title: "Last stable", value: p => p.lastStable ?? "–", num: true },
      { title: "Size", value: p => bytes(p.size), num: true },
    ], t.partitions, { id: "partitions" }));
    shownConfigs = t.configs;
    drawConfigs();
  }
  // The configs, filtered by name or to those set on the topic (dynamic).
  let shownConfigs = [];
  const find = el("input", { name: "find", type: "search", placeholder: "filter by name" });
  const onlySet = el("input", { type: "checkbox", id: "only-set" });
  function drawConfigs() {
    const rows = shownConfigs.filter(c => c.name.includes(find.value.trim()) && (!onlySet.checked || !c.isDefault));
    configs.replaceChildren(table([
      { title: "Name", value: c => c.name },
      { title: "Value", value: c => el("span", { class: c.isDefault ? "muted" : "" }, c.sensitive ? "(sensitive)" : c.value ?? "") },
      { title: "Source", value: c => c.source.replace(/_CONFIG$/, "").toLowerCase().replaceAll("_", " ") },
      { title: "", value: c => (c.readOnly ? "read-only" : el("button", { class: "secondary", onclick: () => edit(c.name, c.value) }, "Edit")) },
    ], rows, { id: "configs" }, "No config matches."));
  }
  find.addEventListener("input", drawConfigs);
  onlySet.addEventListener("change", drawConfigs);
  const [form, edit] = configForm(name, refresh);
  main.append(el("h1", {}, `Topic ${name}`), head, cards, el("h2", {}, "Throughput"), source, charts,
    el("h2", {}, "Partitions"), parts,
    el("h2", {}, "Configs"), form,
    el("div", { class: "toolbar" }, find, el("label", { class: "check" }, onlySet, " only those not at their default")),
    configs);
  return poll(refresh, 5000);
}
