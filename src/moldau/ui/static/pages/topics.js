// #/topics: every topic with its partitions, replication factor, size and rate;
// create one, delete one (after a confirmation), add partitions.
import { getJSON, sendJSON } from "../api.js";
import { bytes, el, link, rate, table } from "../dom.js";
import { showError } from "../app.js";
import { poll } from "../poll.js";

function createForm(refresh) {
  const name = el("input", { name: "name", placeholder: "name", required: true });
  const partitions = el("input", { name: "partitions", type: "number", min: 1, value: 1, style: "width: 6em" });
  const rf = el("input", { name: "replicationFactor", type: "number", min: 1, value: 1, style: "width: 6em" });
  const configs = el("input", { name: "configs", placeholder: "key=value, ...", style: "width: 18em" });
  const form = el("form", { class: "inline", id: "create-topic" },
    el("label", {}, "Name", name), el("label", {}, "Partitions", partitions),
    el("label", {}, "Replication factor", rf), el("label", {}, "Configs", configs),
    el("button", { type: "submit" }, "Create topic"));
  form.addEventListener("submit", async e => {
    e.preventDefault();
    const pairs = configs.value.split(",").map(s => s.trim()).filter(Boolean).map(s => {
      const i = s.indexOf("=");
      return i > 0 ? [s.slice(0, i).trim(), s.slice(i + 1).trim()] : null;
    });
    if (pairs.includes(null)) { showError("Configs: give key=value pairs separated by commas"); return; }
    try {
      await sendJSON("POST", "/api/topics", {
        name: name.value.trim(), partitions: Number(partitions.value),
        replicationFactor: Number(rf.value), configs: Object.fromEntries(pairs),
      });
      name.value = "";
      await refresh();
    } catch (err) { showError(err.message); }
  });
  return form;
}

async function remove(name, refresh) {
  if (!confirm(`Delete topic ${name} and all its records?`)) return;
  try { await sendJSON("DELETE", `/api/topics/${encodeURIComponent(name)}`); await refresh(); }
  catch (err) { showError(err.message); }
}

async function addPartitions(t, refresh) {
  const count = prompt(`New partition count for ${t.name} (now ${t.partitions}):`, t.partitions + 1);
  if (count === null) return;
  try {
    await sendJSON("POST", `/api/topics/${encodeURIComponent(t.name)}/partitions`, { count: Number(count) });
    await refresh();
  } catch (err) { showError(err.message); }
}

export function render(main) {
  const list = el("div");
  const showInternal = el("input", { type: "checkbox", id: "show-internal" });
  let topics = [];
  const draw = () => {
    const shown = topics.filter(t => showInternal.checked || !t.internal);
    list.replaceChildren(table([
      { title: "Topic", value: t => link(`#/topic/${encodeURIComponent(t.name)}`, t.name) },
      { title: "Partitions", value: t => t.partitions, num: true },
      { title: "Replication factor", value: t => t.replicationFactor, num: true },
      { title: "Under-replicated", value: t => el("span", { class: t.underReplicated ? "warn" : "" }, t.underReplicated), num: true },
      { title: "Size", value: t => bytes(t.size), num: true },
      { title: "Messages/s", value: t => rate(t.messagesPerSec, ""), num: true },
      { title: "", value: t => [
        link(`#/messages/${encodeURIComponent(t.name)}`, "messages"), " ",
        el("button", { class: "secondary", onclick: () => addPartitions(t, refresh) }, "Add partitions"), " ",
        el("button", { class: "danger", "data-delete": t.name, onclick: () => remove(t.name, refresh) }, "Delete")] },
    ], shown, { id: "topics" }, topics.length ? "Only internal topics: tick the box to see them." : "No topics yet: create one above."));
  };
  async function refresh() { topics = await getJSON("/api/topics"); draw(); }
  showInternal.addEventListener("change", draw);
  main.append(el("h1", {}, "Topics"), createForm(refresh),
    el("label", { class: "toolbar", style: "flex-direction: row" }, showInternal, " show internal topics"), list);
  return poll(refresh, 5000);
}
