// The holds in force, live: `/v1/holds:watch` read with fetch streaming
// (EventSource cannot send the operator's Authorization header). The
// stream starts with the holds in force and `synced`, then every change;
// the table is swapped in at `synced`, so a reconnect never shows a
// half-read snapshot. Times count down against the server's clock.

import { call, el, errorText, headers, retryAfter, span, token } from "./api.js";

const live = new Map(); // id → hold, as the table shows it
const rows = new Map(); // id → <tr>
let skew = 0; // server clock − this clock, ms
let controller = null;
let backoff = 1000;
let reconnect = null;

const $ = (id) => document.getElementById(id);
const now = () => Date.now() + skew;

function state(text) {
  $("stream-state").textContent = text;
}

function message(text) {
  $("holds-message").textContent = text;
}

/** (Re)opens the stream, closing the one open (e.g. when the token changed). */
export function watch() {
  if (controller) controller.abort();
  clearTimeout(reconnect);
  controller = new AbortController();
  read(controller).catch(() => {});
}

async function read(ctl) {
  let resp;
  try {
    resp = await fetch("/v1/holds:watch", { headers: headers(), cache: "no-store", signal: ctl.signal });
  } catch (e) {
    if (!ctl.signal.aborted) retry(ctl, 0, `cannot reach retryd (${e.message})`);
    return;
  }
  if (!resp.ok) {
    let body = null;
    try { body = await resp.json(); } catch { body = null; }
    retry(ctl, retryAfter(resp), errorText(resp.status, body));
    return;
  }
  state("Stream open: reading the holds in force…");
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let snapshot = new Map();
  let synced = false;
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch {
      break;
    }
    if (chunk.done) break;
    buf += chunk.value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const ev = parse(block);
      if (!ev) continue;
      if (ev.name === "error") {
        message(`The stream ended: ${errorText("error", ev.data)}`);
        continue;
      }
      if (ev.data && ev.data.server_time) skew = Date.parse(ev.data.server_time) - Date.now();
      if (ev.name === "synced") {
        synced = true;
        backoff = 1000;
        live.clear();
        for (const [id, h] of snapshot) live.set(id, h);
        snapshot = null;
        message("");
        state("Live: changes appear as they happen.");
        render();
        continue;
      }
      const into = synced ? live : snapshot;
      const hold = ev.data && ev.data.hold;
      if (!hold) continue;
      if (ev.name === "lifted") into.delete(hold.id);
      else into.set(hold.id, hold);
      if (synced) render();
    }
  }
  if (!ctl.signal.aborted) retry(ctl, 0, "the stream closed");
}

/** One server-sent event: its name and JSON data; null for a comment. */
function parse(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  try {
    return { name, data: JSON.parse(data.join("\n")) };
  } catch {
    return null;
  }
}

function retry(ctl, advised, why) {
  const wait = Math.max(advised, backoff);
  backoff = Math.min(backoff * 2, 15000);
  state(`Not live: ${why}; reconnecting in ${span(wait)}.`);
  reconnect = setTimeout(() => {
    if (ctl === controller) watch();
  }, wait);
}

/** Writes the table: a row per hold, newest first; rows kept across renders. */
export function render() {
  const body = $("holds-body");
  const holds = [...live.values()].sort((a, b) => Date.parse(b.since) - Date.parse(a.since) || a.id.localeCompare(b.id));
  for (const [id, tr] of rows) {
    if (!live.has(id)) {
      tr.remove();
      rows.delete(id);
    }
  }
  holds.forEach((h, i) => {
    let tr = rows.get(h.id);
    if (!tr) {
      tr = el("tr", null, { "data-hold-id": h.id });
      rows.set(h.id, tr);
    }
    fill(tr, h);
    if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
  });
  $("holds-count").textContent = holds.length ? `(${holds.length})` : "";
  $("holds-empty").hidden = holds.length > 0;
  tick();
}

function fill(tr, h) {
  const key = JSON.stringify([h, Boolean(token())]);
  if (tr.dataset.shown === key) return;
  tr.dataset.shown = key;
  const who = h.scope === "method" ? h.method : h.tenant;
  const cells = [
    el("td", h.scope),
    el("td", h.kind.replace("_", " "), { class: `kind ${h.kind}` }),
    el("td", h.dependency),
    el("td", who || "—", { class: "who" }),
    time(h.since, "since"),
    time(h.until, "until"),
    el("td", null, { "data-next-probe": h.next_probe_at || "", "data-probing": String(h.probing) }),
    reason(h),
    releaseCell(h),
  ];
  const focused = tr.contains(document.activeElement) ? document.activeElement.dataset.action : null;
  tr.replaceChildren(...cells);
  if (focused) tr.querySelector(`[data-action="${focused}"]`)?.focus();
}

function time(iso, which) {
  const td = el("td");
  td.append(el("time", "", { datetime: iso, title: iso, "data-count": which }));
  return td;
}

function reason(h) {
  const td = el("td", null, { class: "reason" });
  td.append(el("span", h.reason), el("br"), el("code", h.rule));
  return td;
}

function releaseCell(h) {
  const td = el("td");
  if (!token()) return td;
  const b = el("button", "Release", {
    type: "button",
    "data-action": "release",
    "aria-label": `Release the ${h.kind.replace("_", " ")} on ${h.dependency}${h.tenant ? ` for ${h.tenant}` : ""}`,
  });
  b.addEventListener("click", () => release(h, b));
  td.append(b);
  return td;
}

async function release(h, button) {
  button.disabled = true;
  const r = await call("DELETE", `/v1/holds/${encodeURIComponent(h.id)}`);
  if (r.ok) {
    live.delete(h.id);
    message("");
    state(`Released the ${h.kind.replace("_", " ")} on ${h.dependency}.`);
    render();
    $("holds-title").focus();
  } else {
    button.disabled = false;
    message(`Release refused: ${errorText(r.status, r.body)}`);
  }
}

/** Updates the countdowns: since (ago), until (in), the next probe. */
export function tick() {
  const t = now();
  for (const e of document.querySelectorAll("#holds-body time[data-count]")) {
    const at = Date.parse(e.getAttribute("datetime"));
    e.textContent = e.dataset.count === "since" ? `${span(t - at)} ago` : at > t ? `in ${span(at - t)}` : "now";
  }
  for (const td of document.querySelectorAll("#holds-body td[data-probing]")) {
    const next = Date.parse(td.dataset.nextProbe);
    td.textContent = td.dataset.probing === "true" ? "probing: one call may go"
      : Number.isFinite(next) ? (next > t ? `next probe in ${span(next - t)}` : "probe due") : "no probe";
  }
}
