// Explain: what retryd would answer now for a failure, through the
// read-only `/v1/classify:explain` (nothing placed, spent or logged). The
// form's inputs are named as the failure's JSON fields; `#decision` holds
// the verdict word, `#contract` the ASC contract and the rule that decided.

import { call, el, errorText } from "./api.js";

const $ = (id) => document.getElementById(id);
let catalogs = [];

/** Fills the catalog choices and their codes, and wires the form. */
export async function setup() {
  const form = $("explain");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    explain(form);
  });
  form.elements.catalog.addEventListener("change", () => codes(form.elements.catalog.value));
  const r = await call("GET", "/v1/catalogs");
  if (!r.ok || !r.body || !Array.isArray(r.body.catalogs)) return;
  catalogs = r.body.catalogs;
  for (const c of catalogs) form.elements.catalog.append(el("option", c.name, { value: c.name }));
  codes("");
}

function codes(name) {
  const list = $("codes");
  const chosen = catalogs.filter((c) => !name || c.name === name);
  const all = [...new Set(chosen.flatMap((c) => (c.codes || []).map((k) => k.code)))].sort();
  list.replaceChildren(...all.map((code) => el("option", null, { value: code })));
}

/** The failure the form describes: its non-empty fields. */
export function failure(form) {
  const f = {};
  for (const e of form.elements) {
    if (!e.name) continue;
    const v = e.value.trim();
    if (!v) continue;
    f[e.name] = e.name === "attempt" ? Number(v) : v;
  }
  return f;
}

async function explain(form) {
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  const r = await call("POST", "/v1/classify:explain", { failure: failure(form) });
  button.disabled = false;
  const dl = $("contract");
  if (!r.ok || !r.body || !r.body.decision) {
    $("decision").textContent = "";
    dl.replaceChildren();
    $("explain-message").textContent = `Not explained: ${errorText(r.status, r.body)}`;
    return;
  }
  const d = r.body.decision;
  $("explain-message").textContent = "";
  $("decision").textContent = d.verdict;
  $("decision").className = `verdict-word ${d.verdict}`;
  const rows = [
    ["Rule", d.rule],
    ["Reason", d.reason],
    ["Code", `${d.catalog}/${d.code}${d.known_code ? "" : " (unknown code)"}`],
    ["Operation", `${d.operation}${d.operation_inferred ? " (inferred)" : ""}`],
    ["Scope", d.scope],
    ["Target reached", d.target_reached],
  ];
  const c = d.retry || {};
  rows.push(
    ["retryable / safe", `${c.retryable} / ${c.safe}`],
    ["strategy", c.strategy],
    ["after", c.after_ms === c.max_after_ms ? `${c.after_ms} ms` : `${c.after_ms}–${c.max_after_ms} ms`],
    ["attempt", `${c.attempt} of ${c.max_attempts}`],
    ["side effect", c.side_effect_state],
  );
  if (c.idempotency_key) rows.push(["idempotency key", c.idempotency_key]);
  if (c.reconciliation_action) rows.push(["reconciliation", c.reconciliation_action]);
  if (d.required_transition) rows.push(["required transition", d.required_transition]);
  if (d.hold) rows.push(["Hold in force", hold(d.hold)]);
  const placed = r.body.would_place;
  rows.push(["Would place", placed ? hold(placed) : "no hold"]);
  if (d.budget) {
    const b = d.budget;
    rows.push(["Budget", `${b.scope_key}: ${b.retries} of ${b.allowed} retries, ${b.requests} first attempts`]);
  }
  for (const w of d.warnings || []) rows.push(["Warning", w]);
  dl.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
}

function hold(h) {
  return `${h.kind.replace("_", " ")} on ${h.scope} ${h.dependency}${h.tenant ? `/${h.tenant}` : ""} until ${h.until}`;
}
