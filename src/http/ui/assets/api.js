// The public HTTP routes, from this page's own origin, and the operator
// token: typed into the page, kept in this tab's sessionStorage only, sent
// as `Authorization: Bearer` — and never over plain HTTP to a host other
// than a loopback one, where it would cross the network in clear.

const TOKEN_KEY = "retryd.operator-token";

/** Whether `host` (a URL's hostname) is a loopback address. */
export function isLoopback(host) {
  const h = host.toLowerCase();
  return h === "localhost" || h.endsWith(".localhost") || h === "[::1]" || h === "::1" ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** Whether this page may send a token at all. */
export function tokenAllowed() {
  return location.protocol === "https:" || isLoopback(location.hostname);
}

/** The operator token in use, or "". */
export function token() {
  if (!tokenAllowed()) return "";
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

/** Keeps `value` as this tab's token ("" forgets it); false when refused. */
export function setToken(value) {
  const v = value.trim();
  if (v && !tokenAllowed()) return false;
  try {
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    return false;
  }
  return true;
}

/** The headers of a request: the token when there is one. */
export function headers(extra = {}) {
  const h = { ...extra };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

/** The message of an error answer (a google.rpc.Status), or its status line. */
export function errorText(status, body) {
  if (body && typeof body.message === "string" && body.message) return `${status}: ${body.message}`;
  return `HTTP ${status}`;
}

/**
 * One call: `{ok, status, body, retryAfter, date}`; a network failure is
 * `{ok: false, status: 0}`. A body is sent as JSON.
 */
export async function call(method, path, body) {
  const init = { method, headers: headers(), cache: "no-store", credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    return { ok: false, status: 0, body: { message: `network: ${e.message}` } };
  }
  let parsed = null;
  try {
    parsed = await resp.json();
  } catch {
    parsed = null;
  }
  return { ok: resp.ok, status: resp.status, body: parsed, retryAfter: retryAfter(resp), date: resp.headers.get("Date") };
}

/** A `Retry-After` in whole seconds as milliseconds, or 0. */
export function retryAfter(resp) {
  const s = Number(resp.headers.get("Retry-After"));
  return Number.isFinite(s) && s > 0 ? s * 1000 : 0;
}

/** "3m 12s", "2h 5m", "4d 3h" for a span of milliseconds. */
export function span(ms) {
  let s = Math.max(0, Math.round(ms / 1000));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

/** A new element with text and attributes. */
export function el(tag, text, attrs = {}) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}
