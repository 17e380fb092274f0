// The retry budgets, polled from `/v1/budgets`: per scope, its first
// attempts, approved retries against the allowance (a bar), deferrals, and
// when the next retry would be approved.

import { call, el, errorText, span } from "./api.js";

const EVERY_MS = 3000;
let timer = null;
let shown = [];
let skew = 0;

const $ = (id) => document.getElementById(id);

/** Polls now and every few seconds (slower after a failure). */
export async function poll() {
  clearTimeout(timer);
  const started = Date.now();
  const r = await call("GET", "/v1/budgets?limit=50");
  let wait = EVERY_MS;
  if (r.ok && r.body && Array.isArray(r.body.budgets)) {
    const date = Date.parse(r.date || "");
    skew = Number.isFinite(date) ? date - started : 0;
    shown = r.body.budgets;
    $("budgets-message").textContent = "";
    render();
  } else {
    $("budgets-message").textContent = `Budgets unavailable: ${errorText(r.status, r.body)}`;
    wait = Math.max(r.retryAfter || 0, EVERY_MS * 3);
  }
  timer = setTimeout(poll, wait);
}

function render() {
  const list = $("budgets");
  const items = shown.map((b) => {
    const u = b.budget || {};
    const allowed = Number(u.allowed) || 0;
    const retries = Number(u.retries) || 0;
    const li = el("li", null, { "data-scope-key": u.scope_key || "" });
    const head = el("p", null, { class: "scope" });
    head.append(el("strong", `${b.catalog} · ${b.scope}`), " ", el("code", u.scope_key));
    const id = `bar-${(u.scope_key || "").replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const label = el("label", `Retries ${retries} of ${allowed} allowed`, { for: id });
    const meter = el("meter", `${retries} of ${allowed}`, {
      id, min: "0", max: String(Math.max(allowed, 1)), value: String(Math.min(retries, Math.max(allowed, 1))),
      low: String(Math.floor(allowed * 0.5)), high: String(Math.floor(allowed * 0.8)), optimum: "0",
    });
    const facts = el("p", null, { class: "facts" });
    facts.append(
      `first attempts ${u.requests ?? 0} · deferred ${u.deferred ?? 0} · rule ${b.rule} · `,
      el("span", "", { "data-room": retries < allowed ? "" : u.next_room_at || "" }),
    );
    li.append(head, label, meter, facts);
    return li;
  });
  list.replaceChildren(...items);
  $("budgets-empty").hidden = items.length > 0;
  tick();
}

/** Updates "next retry approved in …". */
export function tick() {
  const t = Date.now() + skew;
  for (const e of document.querySelectorAll("#budgets [data-room]")) {
    const at = Date.parse(e.dataset.room);
    e.textContent = !Number.isFinite(at) || at <= t ? "a retry would be approved now"
      : `next retry approved in ${span(at - t)}`;
  }
}
