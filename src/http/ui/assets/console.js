// The console's start: the token form, the holds' stream, the budgets'
// polling, the explain form, and the one-second clock of the countdowns.

import { setToken, token, tokenAllowed } from "./api.js";
import * as budgets from "./budgets.js";
import * as explain from "./explain.js";
import * as holds from "./holds.js";

const $ = (id) => document.getElementById(id);

function tokenForm() {
  const form = $("token-form");
  const input = form.elements["operator-token"];
  const note = $("token-note");
  if (!tokenAllowed()) {
    // Plain HTTP to another host: the token would cross the network in clear.
    input.disabled = true;
    for (const b of form.querySelectorAll("button")) b.disabled = true;
    note.textContent = "This page came over plain HTTP from a host that is not loopback: it will not send an " +
      "operator token in clear. Serve it over TLS, or on a loopback address (--ui-listen 127.0.0.1:PORT " +
      "through a tunnel), to release holds.";
    note.className = "warn";
    return;
  }
  const apply = (value) => {
    const before = token();
    setToken(value);
    input.value = "";
    input.placeholder = token() ? "token in use (this tab only)" : "";
    if (token() !== before) {
      holds.render();
      holds.watch(); // an operator sees tenants in clear
    }
  };
  input.placeholder = token() ? "token in use (this tab only)" : "";
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (input.value.trim()) apply(input.value);
  });
  $("forget-token").addEventListener("click", () => apply(""));
}

tokenForm();
holds.render();
holds.watch();
budgets.poll();
explain.setup();
setInterval(() => {
  holds.tick();
  budgets.tick();
}, 1000);
