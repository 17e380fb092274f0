#!/usr/bin/env python3
"""The operator console (/ui/) in a real browser: headless Chromium from
Debian's packages driven by Selenium, against the real retryd binary.

  scripts/ui-check.py [--binary target/debug/retryd] [--screenshot PATH]

Starts `retryd serve` with an operator token on free loopback ports, then:
the page loads with no console error (a CSP violation is one); every
control has a label; a hold placed through gRPC (grpcurl, else the HTTP
door) shows as a row within 2 s, its tenant hashed and no release button;
explaining a failure shows the verdict the explain route gives and places
nothing; the token over plain HTTP to a non-loopback host is refused; with
the token typed in, tenants show in clear and each row gets a release
button, kept in sessionStorage only; a hold lifted elsewhere leaves the
table within 2 s; releasing by keyboard removes the row and the hold. The
screenshot (with --screenshot) is taken with two holds, a budget and an
explanation on screen; a pause extended by a later Retry-After shows its
new end within 2 s. Prints `ui-check: N passed, 0 failed` at the end.
Usually run through scripts/ui-check.sh, which installs what it needs.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

TOKEN = "ui-check-operator-token-" + os.urandom(8).hex()
LIVE_WITHIN = 2.0  # seconds: the bound for an event to show
PASSED = []


def check(name):
    PASSED.append(name)
    print(f"ok   {name}", flush=True)


class Retryd:
    """`retryd serve` on free loopback ports, its log kept."""

    def __init__(self, binary, tmp):
        token_file = os.path.join(tmp, "operator.token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off",
             "--shutdown-delay", "0", "--operator-token-file", token_file],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log, found = [], threading.Event()
        self.addr = None

        def read():
            for line in self.proc.stderr:
                self.log.append(line.rstrip())
                if "listening on " in line and not self.addr:
                    self.addr = line.split("listening on ")[1].split()[0]
                    found.set()
        threading.Thread(target=read, daemon=True).start()
        if not found.wait(30):
            self.stop()
            sys.exit("retryd did not report its address:\n" + "\n".join(self.log))
        self.url = f"http://{self.addr}"

    def http(self, method, path, body=None, token=None):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        if body is not None:
            req.add_header("content-type", "application/json")
        if token:
            req.add_header("authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def stop_failure(tenant):
    return {"catalog": "frontspin", "code": "RATE_LIMITED", "operation": "write", "attempt": 1,
            "tenant": tenant, "dependency": "fs-orders"}


def place(server, tenant):
    """Places a quota stop through gRPC (grpcurl, by reflection) when it is
    installed, else through the HTTP door; returns the hold and the way."""
    f = stop_failure(tenant)
    grpcurl = shutil.which("grpcurl") or next(
        (p for p in [os.path.expanduser("~/go/bin/grpcurl")] if os.access(p, os.X_OK)), None)
    if grpcurl:
        req = dict(f, operation="OPERATION_KIND_WRITE")
        out = subprocess.run([grpcurl, "-plaintext", "-d", json.dumps({"failure": req}), server.addr,
                              "retryd.v1.RetryDecisionService/Classify"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        hold = json.loads(out)["decision"]["hold"]
        return hold["id"], "gRPC"
    hold = server.http("POST", "/v1/classify", {"failure": f})["decision"]["hold"]
    return hold["id"], "HTTP (no grpcurl)"


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1440,1300", "--force-prefers-reduced-motion",
              # A name that is not loopback, resolved to loopback: the page
              # must refuse to send a token over plain HTTP there.
              "--host-resolver-rules=MAP retryd.test 127.0.0.1"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return webdriver.Chrome(options=opts, service=Service(executable_path=driver))


def row(d, hold_id):
    return d.find_elements(By.CSS_SELECTOR, f'tr[data-hold-id="{hold_id}"]')


def wait(d, what, cond, within):
    return WebDriverWait(d, within, poll_frequency=0.05).until(lambda _: cond(), message=what)


def severe(d):
    """The browser console's errors since the last call. (Over plain HTTP to
    retryd.test, Chromium notes that it ignores Cross-Origin-Opener-Policy,
    which only applies to trustworthy origins: that one is left out.)"""
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE"
            and not ("retryd.test" in e["message"] and "Opener-Policy" in e["message"])]


def run(server, d, screenshot):
    d.get(server.url.replace("127.0.0.1", "retryd.test") + "/ui/")
    field = d.find_element(By.NAME, "operator-token")
    assert not field.is_enabled(), "the token field is off over plain HTTP to a non-loopback host"
    assert "will not send" in d.find_element(By.ID, "token-note").text
    loopback = d.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('/ui/api.js').then(m => done(['127.0.0.1', 'localhost', '[::1]', 'retryd.test', '10.0.0.1']
          .map(h => m.isLoopback(h))));""")
    assert loopback == [True, True, True, False, False], loopback
    check("the page refuses to send a token over plain HTTP to a non-loopback host")

    d.get(server.url + "/ui/")
    wait(d, "the stream goes live", lambda: "Live" in d.find_element(By.ID, "stream-state").text, 10)
    errors = severe(d)
    assert not errors, f"console errors (a CSP violation is one): {errors}"
    check("the page loads from the binary with no console error, and its stream goes live")

    unlabelled = d.execute_script("""
        return [...document.querySelectorAll('input, select, button')].filter(e =>
          !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim()
        ).map(e => e.outerHTML);""")
    assert not unlabelled, f"controls without a label: {unlabelled}"
    check("every control has a label")

    started = time.monotonic()
    a, way = place(server, "acme-ui")
    wait(d, "the placed hold's row", lambda: row(d, a), LIVE_WITHIN)
    shown_after = time.monotonic() - started
    tenant = row(d, a)[0].find_element(By.CSS_SELECTOR, "td.who").text
    assert tenant.startswith("h:"), f"a non-operator sees the tenant hashed, not {tenant!r}"
    assert not d.find_elements(By.CSS_SELECTOR, '[data-action="release"]'), "no release button without a token"
    check(f"a hold placed through {way} shows within {shown_after:.2f} s, tenant hashed, no release button")

    field = d.find_element(By.NAME, "operator-token")
    field.send_keys(TOKEN, Keys.ENTER)
    wait(d, "release buttons", lambda: d.find_elements(By.CSS_SELECTOR, f'tr[data-hold-id="{a}"] [data-action="release"]'), 5)
    wait(d, "tenant in clear", lambda: row(d, a)[0].find_element(By.CSS_SELECTOR, "td.who").text == "acme-ui", 5)
    kept = d.execute_script("return [sessionStorage.length, localStorage.length, document.cookie]")
    assert kept == [1, 0, ""], f"the token is in sessionStorage only: {kept}"
    check("with the token typed in: tenants in clear, a release button per row, token in sessionStorage only")

    b, _ = place(server, "globex-ui")
    wait(d, "the second hold", lambda: row(d, b), LIVE_WITHIN)
    server.http("POST", "/v1/outcomes", {"counts": [{"catalog": "grpc", "dependency": "payments", "requests": 400}]})
    for _ in range(30):
        server.http("POST", "/v1/classify", {"failure": {"catalog": "grpc", "code": "UNAVAILABLE",
                                                          "operation": "read", "attempt": 1, "dependency": "payments"}})
    wait(d, "a budget bar", lambda: d.find_elements(By.CSS_SELECTOR, "#budgets li meter"), 10)
    # The page polls /v1/budgets every 3 s: a poll between the 30 calls shows
    # the count so far, and the next shows all 30 (never more).
    seen = []

    def approved():
        meter = d.find_element(By.CSS_SELECTOR, '#budgets li[data-scope-key="d:grpc:payments"] meter')
        try:
            seen.append(meter.get_attribute("value"))
        except StaleElementReferenceException:  # re-rendered by a poll
            return False
        return seen[-1] == "30"
    try:
        wait(d, "30 retries approved", approved, 10)
    except TimeoutException:
        raise AssertionError(f"30 retries approved: the bar read {sorted(set(seen))}") from None
    assert all(int(v or 0) <= 30 for v in seen), f"never more than the 30 approved: {sorted(set(seen))}"
    check("the budgets show each scope's approved retries as a bar")

    holds_before = len(server.http("GET", "/v1/holds")["holds"])
    form = d.find_element(By.ID, "explain")
    wait(d, "the catalogs", lambda: len(form.find_elements(By.CSS_SELECTOR, "select[name=catalog] option")) > 1, 5)
    Select(form.find_element(By.NAME, "catalog")).select_by_value("vibecode")
    form.find_element(By.NAME, "code").send_keys("BITRIX_TIMEOUT")
    Select(form.find_element(By.NAME, "operation")).select_by_value("write")
    attempt = form.find_element(By.NAME, "attempt")
    attempt.clear()
    attempt.send_keys("2")
    form.find_element(By.NAME, "idempotency_key").send_keys("order-42")
    form.find_element(By.NAME, "code").send_keys(Keys.ENTER)
    want = server.http("POST", "/v1/classify:explain", {"failure": {
        "catalog": "vibecode", "code": "BITRIX_TIMEOUT", "operation": "write", "attempt": 2,
        "idempotency_key": "order-42"}})["decision"]
    wait(d, "the verdict", lambda: d.find_element(By.ID, "decision").text == want["verdict"], 5)
    contract = d.find_element(By.ID, "contract").text
    assert want["rule"] in contract, f"the rule {want['rule']} is shown: {contract}"
    form.find_element(By.NAME, "idempotency_key").clear()
    for name, value in [("dependency", "fs-orders"), ("tenant", "globex-ui")]:
        form.find_element(By.NAME, name).send_keys(value)
    Select(form.find_element(By.NAME, "catalog")).select_by_value("frontspin")
    code = form.find_element(By.NAME, "code")
    code.clear()
    code.send_keys("RATE_LIMITED", Keys.ENTER)
    wait(d, "would place", lambda: "quota stop on tenant fs-orders/globex-ui" in d.find_element(By.ID, "contract").text, 5)
    assert len(server.http("GET", "/v1/holds")["holds"]) == holds_before, "explain placed nothing"
    check(f"explain shows the route's verdict ({want['verdict']}) and rule, and what it would place, placing nothing")

    if screenshot:
        d.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
        d.save_screenshot(screenshot)
        print(f"     screenshot: {screenshot}")

    started = time.monotonic()
    server.http("DELETE", f"/v1/holds/{b}", token=TOKEN)
    wait(d, "the row of a hold lifted elsewhere goes", lambda: not row(d, b), LIVE_WITHIN)
    check(f"a hold lifted elsewhere leaves the table within {time.monotonic() - started:.2f} s")

    def pause(seconds):
        return server.http("POST", "/v1/classify", {"failure": {
            "catalog": "http", "code": "503", "operation": "read", "attempt": 1, "dependency": "inventory",
            "retry_after": str(seconds)}})["decision"]["hold"]
    p = pause(30)
    wait(d, "the pause's row", lambda: row(d, p["id"]), LIVE_WITHIN)
    started = time.monotonic()
    longer = pause(90)
    assert longer["id"] == p["id"] and longer["until"] > p["until"], (p, longer)
    until = f'tr[data-hold-id="{p["id"]}"] time[data-count="until"]'
    wait(d, "the extended until", lambda: d.find_element(By.CSS_SELECTOR, until).get_attribute("datetime")
         == longer["until"], LIVE_WITHIN)
    check(f"an extended hold shows its new end within {time.monotonic() - started:.2f} s")
    server.http("DELETE", f"/v1/holds/{p['id']}", token=TOKEN)
    wait(d, "the pause's row goes", lambda: not row(d, p["id"]), LIVE_WITHIN)

    button = d.find_element(By.CSS_SELECTOR, f'tr[data-hold-id="{a}"] [data-action="release"]')
    button.send_keys(Keys.ENTER)  # by keyboard: focus and Enter
    wait(d, "the released row goes", lambda: not row(d, a), LIVE_WITHIN)
    assert server.http("GET", "/v1/holds")["holds"] == [], "the hold is released on the server"
    assert "Released" in d.find_element(By.ID, "stream-state").text
    check("releasing by keyboard with the token removes the row and the hold")
    errors = severe(d)
    assert not errors, f"console errors: {errors}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p.add_argument("--binary", default=os.path.join(root, "target", "debug", "retryd"))
    p.add_argument("--screenshot", help="save the console's screenshot here (PNG)")
    args = p.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="retryd-ui-") as tmp:
        server = Retryd(args.binary, tmp)
        d = None
        try:
            d = browser()
            run(server, d, args.screenshot)
        except Exception as e:
            print(f"FAIL {type(e).__name__}: {e}", flush=True)
            print("retryd's log:\n  " + "\n  ".join(server.log[-30:]))
            print(f"ui-check: {len(PASSED)} passed, 1 failed")
            sys.exit(1)
        finally:
            if d:
                d.quit()
            server.stop()
    print(f"ui-check took {time.monotonic() - started:.1f} s")
    print(f"ui-check: {len(PASSED)} passed, 0 failed")


if __name__ == "__main__":
    main()
