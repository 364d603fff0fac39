// #/cluster: brokers, controller, partition health and live throughput charts.
import { getJSON } from "../api.js";
import { lineChart } from "../chart.js";
import { card, el, table } from "../dom.js";
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
  const charts = CHARTS.map(([name, title]) => [name, el("div", { class: "chart-body" }), title]);
  main.append(el("h1", {}, "Cluster"), cards, el("h2", {}, "Brokers"), brokers,
    el("h2", {}, "Throughput"), source,
    el("div", { class: "charts" }, charts.map(([, body, title]) =>
      el("div", { class: "chart" }, el("div", { class: "title" }, title), body))));

  return poll(async () => {
    const c = await getJSON("/api/cluster");
    const offline = c.brokers.filter(b => !b.online).length;
    cards.replaceChildren(
      card("Brokers online", `${c.brokers.length - offline} / ${c.brokers.length}`, offline ? "bad" : "ok"),
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
    ], c.brokers, { id: "brokers" }));
    if (c.error) throw new Error(`cannot reach the cluster at ${c.bootstrap}: ${c.error}`);
    source.textContent = c.throughput.source === "metrics"
      ? "From the brokers' metrics endpoints (Kafka's BrokerTopicMetrics)."
      : "From the protocol: bytes in as the growth of the leaders' log sizes (DescribeLogDirs), messages as the growth of the high watermarks (ListOffsets); bytes out needs the brokers' metrics endpoints (--metrics-url).";
    const byName = Object.fromEntries(c.throughput.series.map(s => [s.name, s]));
    CHARTS.forEach(([name, , unit], i) => lineChart(charts[i][1], { series: [byName[name] || { name, points: [] }], unit }));
  });
}
