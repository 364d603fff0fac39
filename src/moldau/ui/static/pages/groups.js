// #/groups: every consumer group with its state, protocol, assignor, members and lag.
import { getJSON } from "../api.js";
import { el, link, table } from "../dom.js";
import { poll } from "../poll.js";

export function render(main) {
  const body = el("div");
  main.append(el("h1", {}, "Consumer groups"), body);
  return poll(async () => {
    const { groups } = await getJSON("/api/groups");
    body.replaceChildren(groups.length ? table([
      { title: "Group", value: g => link(`#/group/${encodeURIComponent(g.group)}`, g.group) },
      { title: "State", value: g => g.state },
      { title: "Protocol", value: g => g.protocolType || "(simple)" },
      { title: "Assignor", value: g => g.assignor || "–" },
      { title: "Members", value: g => g.members, num: true },
      { title: "Partitions", value: g => g.partitions, num: true },
      { title: "Lag", value: g => g.lag.toLocaleString(), num: true },
    ], groups, { id: "groups" }) : el("p", { class: "note" }, "No consumer groups."));
  });
}
