// progressBar(0.4, "40 %"): a bar and its label, for a reassignment's progress.
import { el } from "./dom.js";

export function progressBar(fraction, label) {
  const f = Math.max(0, Math.min(1, Number(fraction) || 0));
  return el("span", { class: "progress-wrap" },
    el("span", { class: "progress", role: "progressbar", "aria-valuenow": Math.round(f * 100) },
      el("div", { style: `width: ${(f * 100).toFixed(1)}%` })),
    " ", label ?? `${Math.round(f * 100)} %`);
}
