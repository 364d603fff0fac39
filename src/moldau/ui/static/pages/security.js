// #/security: ACLs (filter, add with `moldau acls`' choices, delete) and SCRAM
// users (add or update a credential, delete one). A cluster without an authorizer
// says so instead of listing ACLs.
import { getJSON, sendJSON } from "../api.js";
import { el, table } from "../dom.js";
import { poll } from "../poll.js";

const TYPES = ["topic", "group", "cluster", "transactional-id", "delegation-token"];
const OPERATIONS = ["All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
  "DescribeConfigs", "AlterConfigs", "IdempotentWrite"];
const select = (name, options, attrs = {}) => el("select", { name, ...attrs }, options.map(([v, t]) => el("option", { value: v }, t ?? v)));
const pairs = list => list.map(v => [v]);
const fields = form => Object.fromEntries(new FormData(form).entries());

export function render(main) {
  const note = el("p", { class: "note", id: "acl-note" });
  const acls = el("div");
  const users = el("div");
  const status = el("p", { class: "note", id: "security-status" });
  const say = (text, cls = "note") => { status.className = cls; status.textContent = text; };
  const act = fn => async e => { e.preventDefault(); try { await fn(e); } catch (err) { say(err.message, "bad"); } };

  const filter = el("form", { class: "inline", id: "acl-filter", onsubmit: act(() => refresh()) },
    el("label", {}, "Resource type", select("resourceType", [["", "any"], ...pairs(TYPES)])),
    el("label", {}, "Name", el("input", { name: "name", size: 14 })),
    el("label", {}, "Pattern", select("patternType", pairs(["any", "match", "literal", "prefixed"]))),
    el("label", {}, "Principal", el("input", { name: "principal", placeholder: "User:alice", size: 14 })),
    el("button", { class: "secondary" }, "Filter"));
  const add = el("form", { class: "inline", id: "acl-add", onsubmit: act(async () => {
    const f = fields(add);
    const op = f.operation;
    const body = { ...f, operations: op.startsWith("preset:") ? [] : [op], preset: op.startsWith("preset:") ? op.slice(7) : "" };
    const { added } = await sendJSON("POST", "/api/security/acls", body);
    say(`Added ${added.length} ACL(s).`);
    await refresh();
  }) },
    el("label", {}, "Resource type", select("resourceType", pairs(TYPES))),
    el("label", {}, "Name", el("input", { name: "name", placeholder: "* for all", size: 14 })),
    el("label", {}, "Pattern", select("patternType", pairs(["literal", "prefixed"]))),
    el("label", {}, "Permission", select("permission", pairs(["allow", "deny"]))),
    el("label", {}, "Principal", el("input", { name: "principal", placeholder: "User:alice", required: true, size: 14 })),
    el("label", {}, "Host", el("input", { name: "host", value: "*", size: 8 })),
    el("label", {}, "Operation", select("operation", [...pairs(OPERATIONS), ["preset:producer", "--producer"], ["preset:consumer", "--consumer"]])),
    el("button", {}, "Add ACL"));
  const addUser = el("form", { class: "inline", id: "user-add", onsubmit: act(async () => {
    const f = fields(addUser);
    await sendJSON("POST", "/api/security/users", { ...f, iterations: Number(f.iterations) });
    say(`Credential ${f.mechanism} of ${f.user} saved.`);
    addUser.reset();
    await refresh();
  }) },
    el("label", {}, "User", el("input", { name: "user", required: true, size: 14 })),
    el("label", {}, "Mechanism", select("mechanism", pairs(["SCRAM-SHA-256", "SCRAM-SHA-512"]))),
    el("label", {}, "Iterations", el("input", { name: "iterations", type: "number", value: 4096, min: 4096, max: 16384 })),
    el("label", {}, "Password", el("input", { name: "password", type: "password", required: true, autocomplete: "new-password" })),
    el("button", {}, "Add / update"));

  main.append(el("h1", {}, "Security"), status,
    el("h2", {}, "ACLs"), filter, note, acls, add,
    el("h2", {}, "SCRAM users"), users, addUser);

  async function refresh() {
    const query = new URLSearchParams(Object.entries(fields(filter)).filter(([, v]) => v && v !== "any"));
    const a = await getJSON(`/api/security/acls?${query}`);
    note.textContent = a.note || "";
    add.style.display = a.authorizer ? "" : "none";  // not `hidden`: form.inline is a flex box
    acls.replaceChildren(a.authorizer ? table([
      { title: "Resource", value: r => `${r.resourceType}:${r.name}` }, { title: "Pattern", value: r => r.patternType },
      { title: "Principal", value: r => r.principal }, { title: "Host", value: r => r.host },
      { title: "Operation", value: r => r.operation }, { title: "Permission", value: r => r.permission },
      { title: "", value: r => el("button", { class: "secondary", onclick: act(async () => {
        await sendJSON("POST", "/api/security/acls/delete", r);
        say(`Deleted ${r.permission} ${r.operation} for ${r.principal} on ${r.resourceType}:${r.name}.`);
        await refresh();
      }) }, "Delete") },
    ], a.acls, { id: "acls" }) : "");
    const u = await getJSON("/api/security/users");
    users.replaceChildren(u.users.length ? table([
      { title: "User", value: x => x.user },
      { title: "Credentials", value: x => x.credentials.map(c => el("span", { class: "credential" },
        `${c.mechanism} (${c.iterations} iterations) `,
        el("button", { class: "secondary", onclick: act(async () => {
          await sendJSON("DELETE", `/api/security/users/${encodeURIComponent(x.user)}/${c.mechanism}`);
          say(`Credential ${c.mechanism} of ${x.user} deleted.`);
          await refresh();
        }) }, "Delete"), " ")) },
    ], u.users, { id: "users" }) : el("p", { class: "note" }, "No SCRAM users."));
  }
  return poll(refresh, 5000);
}
