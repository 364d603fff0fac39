// poll(fn, ms): call fn now and every ms until the returned stop is called; an
// error shows in the banner and polling goes on (the cluster may come back).
import { showError } from "./app.js";

export function poll(fn, ms = 2000) {
  let stopped = false, timer = null;
  async function tick() {
    try { await fn(); showError(""); } catch (e) { if (!stopped) showError(e.message); }
    if (!stopped) timer = setTimeout(tick, ms);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
