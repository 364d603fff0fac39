// The hash router: #/<page>/<arg>/... loads pages/<page>.js and calls its
// render(main, args); what render returns (a function) is called when the page
// changes, to stop its timers. A failing page shows its error in the banner.
const main = document.getElementById("page");
const banner = document.getElementById("banner");
let cleanup = null;

export function showError(message) {
  banner.textContent = message;
  banner.hidden = !message;
}

async function route() {
  if (cleanup) { try { cleanup(); } catch { /* the old page is gone anyway */ } cleanup = null; }
  showError("");
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const page = parts.shift() || "cluster";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.page === page || (page === "topic" || page === "messages") && a.dataset.page === "topics"
      || page === "group" && a.dataset.page === "groups");
  }
  main.replaceChildren();
  try {
    if (!/^[a-z-]+$/.test(page)) throw new Error(`no page ${page}`);
    const module = await import(`./pages/${page}.js`);
    cleanup = (await module.render(main, parts)) || null;
  } catch (e) {
    showError(e.message.startsWith("Failed to fetch dynamically") ? `no page ${page}` : e.message);
  }
}

window.addEventListener("hashchange", route);
route();
