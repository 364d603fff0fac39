// #/cluster: brokers, controller, partition health and live throughput charts.
import { getJSON } from "../api.js";
import { chartGrid } from "../chart.js";
import { card, el, noThroughput, table, throughputSource } from "../dom.js";
import { poll } from "../poll.js";

const CHARTS = [
  ["cluster.bytes_in", "Bytes in per second", "B"],
  ["cluster.bytes_out", "Bytes out per second", "B"],
  ["cluster.messages_in", "Messages in per second", ""],
];

export function render(main) {
  const cards = el("div", { class: "cards" });
  const brokers = el("div");
  const source = el("p", { class: "note" });
  const [charts, drawCharts] = chartGrid(CHARTS);
  main.append(el("h1", {}, "Cluster"), cards, el("h2", {}, "Brokers"), brokers,
    el("h2", {}, "Throughput"), source, charts);

  return poll(async () => {
    const c = await getJSON("/api/cluster");
    const offline = c.brokers.filter(b => !b.online).length;
    cards.replaceChildren(
      card("Brokers online", `${c.brokers.length - offline} / ${c.brokers.length}`, offline || !c.brokers.length ? "bad" : "ok"),
      card("Controller", c.controller ?? "none", c.controller === null ? "bad" : ""),
      card("Topics", c.topics), card("Partitions", c.partitions),
      card("Under-replicated", c.underReplicated, c.underReplicated ? "warn" : "ok"),
      card("Offline partitions", c.offlinePartitions, c.offlinePartitions ? "bad" : "ok"));
    brokers.replaceChildren(table([
      { title: "Id", value: b => b.id, num: true },
      { title: "Host", value: b => `${b.host}:${b.port}` },
      { title: "Rack", value: b => b.rack ?? "–" },
      { title: "Role", value: b => (b.id === c.controller ? "controller" : "") },
      { title: "Status", value: b => el("span", { class: `badge ${b.online ? "ok" : "bad"}`, "data-broker": b.id }, b.online ? "online" : "offline") },
    ], c.brokers, { id: "brokers" }, "No broker has answered yet."));
    if (c.error) throw new Error(`cannot reach the cluster at ${c.bootstrap}: ${c.error}`);
    source.textContent = throughputSource(c.throughput.source);
    drawCharts(c.throughput.series, noThroughput(c.throughput.source, "no data yet"));
  });
}
