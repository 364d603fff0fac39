// #/group/<id>: a consumer group's members, offsets and lag (with its history);
// reset its offsets (a dry run first, as `moldau groups --reset-offsets`), delete
// a partition's offset or the group.
import { getJSON, sendJSON } from "../api.js";
import { lineChart } from "../chart.js";
import { card, el, table } from "../dom.js";
import { poll } from "../poll.js";

const SCENARIOS = ["to-earliest", "to-latest", "to-current", "to-offset", "shift-by", "to-datetime", "by-duration"];
const HINTS = { "to-offset": "offset", "shift-by": "±n", "to-datetime": "2026-01-31T12:00:00", "by-duration": "PT1H" };
const dash = v => (v === null || v === undefined ? "–" : v.toLocaleString());

export function render(main, [group]) {
  const api = `/api/groups/${encodeURIComponent(group)}`;
  const cards = el("div", { class: "cards" });
  const chart = el("div", { class: "chart-body", id: "lag-chart" });
  const members = el("div");
  const partitions = el("div");
  const status = el("p", { class: "note", id: "group-status" });
  const plan = el("div", { id: "reset-plan" });
  const say = (text, cls = "note") => { status.className = cls; status.textContent = text; };
  const act = fn => async () => { try { await fn(); } catch (e) { say(e.message, "bad"); } };

  const scenario = el("select", { name: "scenario", onchange: () => { value.placeholder = HINTS[scenario.value] || ""; value.disabled = !HINTS[scenario.value]; } },
    SCENARIOS.map(s => el("option", { value: s }, s)));
  const value = el("input", { name: "value", disabled: true, size: 22 });
  const topics = el("input", { name: "topics", placeholder: "all, or: orders payments:0,1", size: 26 });
  async function reset(execute) {
    const body = { scenario: scenario.value, value: value.value, execute,
      topics: topics.value.split(/\s+/).filter(Boolean) };
    const r = await sendJSON("POST", `${api}/reset-offsets`, body);
    plan.replaceChildren(table([
      { title: "Topic", value: p => p.topic }, { title: "Partition", value: p => p.partition, num: true },
      { title: "Current offset", value: p => dash(p.current), num: true }, { title: "New offset", value: p => p.new, num: true },
    ], r.plan, { id: "plan" }), ...r.notes.map(n => el("p", { class: "note" }, n)));
    say(execute ? `Offsets reset for ${r.plan.length} partition(s).` : "Dry run: nothing changed yet.");
  }
  let armed = false;
  const del = el("button", { class: "danger", id: "delete-group", onclick: act(async () => {
    if (!armed) { armed = true; del.textContent = "Click again to delete the group"; return; }
    await sendJSON("DELETE", api);
    location.hash = "#/groups";
  }) }, "Delete group");

  main.append(el("h1", {}, `Consumer group ${group}`), cards,
    el("div", { class: "charts" }, el("div", { class: "chart" }, el("div", { class: "title" }, "Total lag (records)"), chart)),
    el("h2", {}, "Members"), members, el("h2", {}, "Partitions"), partitions,
    el("h2", {}, "Reset offsets"),
    el("form", { class: "inline", id: "reset", onsubmit: e => e.preventDefault() },
      el("label", {}, "Scenario", scenario), el("label", {}, "Value", value), el("label", {}, "Topics", topics),
      el("button", { type: "button", class: "secondary", id: "dry-run", onclick: act(() => reset(false)) }, "Dry run"),
      el("button", { type: "button", id: "execute", onclick: act(() => reset(true)) }, "Execute")),
    status, plan, el("h2", {}, "Danger zone"), del);

  return poll(async () => {
    const g = await getJSON(api);
    cards.replaceChildren(card("State", g.state, g.state === "Stable" ? "ok" : ""),
      card("Members", g.members.length), card("Assignor", g.assignor || "–"),
      card("Coordinator", `${g.coordinator.id} (${g.coordinator.host}:${g.coordinator.port})`),
      el("div", { class: "card", id: "total-lag" }, el("div", { class: "label" }, "Total lag"),
        el("div", { class: "value" }, g.lag.toLocaleString())));
    lineChart(chart, { series: g.lagHistory, unit: "" });
    members.replaceChildren(g.members.length ? table([
      { title: "Client id", value: m => m.clientId }, { title: "Host", value: m => m.host },
      { title: "Member id", value: m => el("span", { class: "muted" }, m.memberId) },
      { title: "Partitions", value: m => m.partitions.join(", ") || "–" },
    ], g.members, { id: "members" }) : el("p", { class: "note" }, "No active members."));
    partitions.replaceChildren(table([
      { title: "Topic", value: p => p.topic }, { title: "Partition", value: p => p.partition, num: true },
      { title: "Committed", value: p => dash(p.offset), num: true },
      { title: "Log end", value: p => dash(p.logEndOffset), num: true },
      { title: "Lag", value: p => dash(p.lag), num: true },
      { title: "Member", value: p => p.clientId || "–" },
      { title: "", value: p => p.offset === null ? "" : el("button", { class: "secondary", onclick: act(async () => {
        const r = await sendJSON("POST", `${api}/delete-offsets`, { partitions: [{ topic: p.topic, partition: p.partition }] });
        const refused = Object.entries(r.refused);
        say(refused.length ? `Not deleted: ${refused.map(([tp, e]) => `${tp} (${e})`).join(", ")}` : `Offset of ${p.topic}-${p.partition} deleted.`,
          refused.length ? "bad" : "note");
      }) }, "Delete offset") },
    ], g.partitions, { id: "partitions" }));
  });
}
