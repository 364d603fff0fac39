// #/reassignments: the partitions being reassigned, each with a progress bar: how
// much of the leader's log (from its log start to its high watermark) the slowest
// adding replica holds. Refreshed every 2 s; a reassignment can be cancelled.
import { getJSON, sendJSON } from "../api.js";
import { el, table } from "../dom.js";
import { progressBar } from "../progress.js";
import { poll } from "../poll.js";

const ids = list => (list.length ? list.join(", ") : "–");

export function render(main) {
  const body = el("div");
  const status = el("p", { class: "note", id: "reassignment-status" });
  main.append(el("h1", {}, "Reassignments"),
    el("p", { class: "note" }, "Progress: the share of the leader's log (log start to high watermark) the slowest adding replica has copied, from ListOffsets."),
    status, body);

  async function cancel(r) {
    try {
      const { errors } = await sendJSON("POST", "/api/reassignments/cancel", { partitions: [{ topic: r.topic, partition: r.partition }] });
      const failed = Object.entries(errors);
      status.className = failed.length ? "bad" : "note";
      status.textContent = failed.length ? failed.map(([tp, e]) => `${tp}: ${e}`).join("; ") : `Cancelled the reassignment of ${r.topic}-${r.partition}.`;
    } catch (e) { status.className = "bad"; status.textContent = e.message; }
  }

  return poll(async () => {
    const { reassignments } = await getJSON("/api/reassignments");
    body.replaceChildren(reassignments.length ? table([
      { title: "Partition", value: r => `${r.topic}-${r.partition}` },
      { title: "Replicas", value: r => ids(r.replicas) },
      { title: "Adding", value: r => ids(r.adding) },
      { title: "Removing", value: r => ids(r.removing) },
      { title: "Leader", value: r => r.leader, num: true },
      { title: "Progress", value: r => el("span", { "data-partition": `${r.topic}-${r.partition}` },
        progressBar(r.fraction, `${Math.floor(r.fraction * 100)} %`),
        el("div", { class: "note" }, r.progress.map(p => `broker ${p.broker}: ${p.offset ?? "no log"} of ${r.highWatermark ?? "?"}`).join("; "))) },
      { title: "", value: r => el("button", { class: "secondary", onclick: () => cancel(r) }, "Cancel") },
    ], reassignments, { id: "reassignments" }) : el("p", { class: "note", id: "no-reassignments" }, "No partition reassignments in progress."));
  });
}
