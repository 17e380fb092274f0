#!/usr/bin/env python3
"""Runs the documentation's runnable shell snippets, so the docs stay true.

Extracts every shell snippet (a fence opening with ```sh, ```bash or
```shell) from README.md, docs/**/*.md and examples/**/README.md, and runs
those whose fence says `runnable` (```sh runnable) as a newcomer would, in
reading order:

- retryd is built (`cargo build --bin retryd`, the debug binary `cargo test`
  already built, so in CI this is a no-op) and put on PATH as `retryd`, as
  `cargo install --path .` would;
- the quick start's `retryd serve` runs in the background, as the README
  leaves it, on 127.0.0.1:50051 (gRPC and HTTP) and 127.0.0.1:9464
  (metrics), for the whole run: a snippet that starts a server on those
  ports fails, as it would for a reader. If either port is taken on this
  machine the run stops and says so; DOC_SNIPPETS_FREE_PORTS=1 moves the
  background server to free ports and points the snippets' `:50051` and
  `:9464` at them (for a busy machine; CI uses the real ports);
- each snippet runs with `bash -euo pipefail` from a copy of the files the
  docs refer to (examples/, policies/, proto/, deploy/), with TMPDIR set to a
  folder of the run and no RETRYD_* variable from the caller's environment;
  a snippet that leaves a file behind in that copy fails (scratch files
  belong in `mktemp -d` or $TMPDIR), and so does one that starts a
  `retryd serve` in the background without choosing its own `--listen` and
  `--metrics-listen`, or that stops the background server.

A snippet that fails (non-zero exit, or over its time limit) fails the run.
A snippet that needs grpcurl, ghz, grpc_health_probe, curl or helm when it is
not installed fails too when REQUIRE_TOOLS=1 (as .ci/run sets, after
installing them), and is skipped otherwise.

    python3 scripts/doc-snippets.py            # from anywhere
    RETRYD_BIN=path/to/retryd python3 scripts/doc-snippets.py
    python3 scripts/doc-snippets.py --self-test   # the checks on snippets, on made-up snippets
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHELLS = {"sh", "bash", "shell"}
TOOLS = ["grpcurl", "ghz", "grpc_health_probe", "curl", "helm"]
SNIPPET_TIMEOUT_S = 120
# A refactor that drops the markers must not pass by running nothing.
MIN_RUNNABLE = 12
# What the snippets may read, copied from the checkout.
COPIED = ["examples", "policies", "proto", "deploy"]
QUICK_START_GRPC, QUICK_START_METRICS = 50051, 9464


def docs():
    skip = {"node_modules", ".venv", "target"}
    found = [ROOT / "README.md"]
    found += sorted((ROOT / "docs").rglob("*.md"))
    for p in sorted((ROOT / "examples").rglob("README.md")):
        if not skip & set(p.relative_to(ROOT).parts):
            found.append(p)
    return found


def snippets(path):
    """(line, runnable, code) of each shell snippet of a Markdown file."""
    out = []
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        lang, info = m.group(1), m.group(2)
        start = i + 1
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        if lang in SHELLS:
            out.append((start, "runnable" in info.split(), "\n".join(lines[start:i]) + "\n"))
        i += 1
    return out


def own_server_problem(code):
    """Why a snippet's own `retryd serve` would clash with the quick start's, or None.

    A server started in the background must choose its own gRPC and metrics
    addresses (a free port: `--listen 127.0.0.1:0`); one in the foreground
    would never return, so it is not a runnable snippet at all.
    """
    # Join continued lines, so the flags of one command are on one line.
    joined = re.sub(r"\\\n", " ", code)
    for line in joined.split("\n"):
        command = line.split("#", 1)[0]
        if not re.search(r"(^|[\s;&(|])retryd serve\b", command):
            continue
        if not re.search(r"&\s*$", command.rstrip()) and "&" not in command.split("retryd serve", 1)[1]:
            return "runs `retryd serve` in the foreground: it never returns"
        for flag in ["--listen", "--metrics-listen"]:
            if not re.search(rf"{flag}[ =]", command):
                return (f"starts `retryd serve` without {flag}: it clashes with the quick start's server "
                        "(pick a free port: --listen 127.0.0.1:0, --metrics-listen off or 127.0.0.1:0)")
    return None


def self_test():
    ok = "retryd serve --listen 127.0.0.1:0 --metrics-listen off 2>log &\n"
    cont = "retryd serve --policy p \\\n  --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 2>log &\n"
    clash = "retryd serve --operator-token-file t &\n"
    half = "retryd serve --listen 127.0.0.1:0 &\n"
    fg = "retryd serve --listen 127.0.0.1:0 --metrics-listen off\n"
    none = "retryd classify --code X  # not retryd serve\n"
    assert own_server_problem(ok) is None
    assert own_server_problem(cont) is None
    assert own_server_problem(none) is None
    assert "--listen" in own_server_problem(clash)
    assert "--metrics-listen" in own_server_problem(half)
    assert "foreground" in own_server_problem(fg)
    lines = snippets_of_text("x\n```sh runnable\necho a\n```\n```sh\necho b\n```\n```python\nx\n```\n")
    assert lines == [(2, True, "echo a\n"), (5, False, "echo b\n")], lines
    print("doc-snippets: self-test passed")
    return 0


def snippets_of_text(text):
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
        f.write(text)
    try:
        return snippets(Path(f.name))
    finally:
        os.unlink(f.name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def build():
    if os.environ.get("RETRYD_BIN"):
        return Path(os.environ["RETRYD_BIN"]).resolve()
    subprocess.run(
        ["cargo", "build", "--quiet", "--bin", "retryd", "--manifest-path", str(ROOT / "Cargo.toml")],
        check=True,
    )
    target = os.environ.get("CARGO_TARGET_DIR") or str(ROOT / "target")
    return Path(target).resolve() / "debug" / "retryd"


def files_of(tree):
    """Every file under `tree` with its size and modification time."""
    out = {}
    for dirpath, _, names in os.walk(tree):
        for n in names:
            p = Path(dirpath) / n
            try:
                st = p.lstat()
            except FileNotFoundError:
                continue
            out[str(p.relative_to(tree))] = (st.st_size, st.st_mtime_ns)
    return out


def run_snippet(code, cwd, env):
    """(exit status or why it failed, output, whether it left processes
    running) of one snippet; whatever it left running (its own process
    group) is stopped after it. The output goes to a file, so a background
    process that keeps the snippet's stdout open cannot hold the run up."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", code], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status = proc.wait(timeout=SNIPPET_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            status = f"timed out after {SNIPPET_TIMEOUT_S} s"
        left_running = False
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            left_running = True
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.seek(0)
        return status, out.read().decode(errors="replace"), left_running


class Server:
    """The quick start's `retryd serve`, in the background for the whole run."""

    def __init__(self, cwd, env, args, log_path):
        self.cwd, self.env, self.args, self.log_path = cwd, env, args, log_path
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["retryd", "serve", *self.args], cwd=self.cwd, env=self.env,
                                     stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"doc-snippets: the quick start's retryd serve exited {self.proc.returncode}:\n"
                         + self.log_path.read_text(errors="replace"))
            if self.serving():
                return
            time.sleep(0.2)
        self.stop()
        sys.exit("doc-snippets: the quick start's retryd serve did not become SERVING within 60 s")

    def serving(self):
        probe = subprocess.run(["retryd", "health", "--timeout", "1s", "--addr", self.health_addr],
                               env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return probe.returncode == 0

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            self.proc = None
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.log.close()


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    started = time.monotonic()
    require_tools = os.environ.get("REQUIRE_TOOLS") == "1"
    free_ports = os.environ.get("DOC_SNIPPETS_FREE_PORTS") == "1"
    binary = build()
    if not binary.is_file():
        sys.exit(f"doc-snippets: no retryd binary at {binary}")

    if free_ports:
        grpc_port, metrics_port = free_port(), free_port()
    else:
        grpc_port, metrics_port = QUICK_START_GRPC, QUICK_START_METRICS
        taken = [p for p in (grpc_port, metrics_port) if port_taken(p)]
        if taken:
            sys.exit(f"doc-snippets: port(s) {', '.join(map(str, taken))} of 127.0.0.1 are taken on this machine; "
                     "the snippets run next to the quick start's server on 50051 and 9464. Stop what listens "
                     "there, or run with DOC_SNIPPETS_FREE_PORTS=1")

    run_dir = Path(tempfile.mkdtemp(prefix="retryd-doc-snippets."))
    checkout = run_dir / "checkout"   # what the snippets see as the checkout; cwd
    try:
        for d in COPIED:
            shutil.copytree(ROOT / d, checkout / d, symlinks=True,
                            ignore=shutil.ignore_patterns("node_modules", ".venv", "__pycache__"))
        bindir = run_dir / "bin"
        bindir.mkdir()
        (bindir / "retryd").symlink_to(binary)
        tmpdir = run_dir / "tmp"
        tmpdir.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETRYD_") and k != "RUST_LOG"}
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        env["TMPDIR"] = str(tmpdir)

        args = []
        if free_ports:
            args = ["--listen", f"127.0.0.1:{grpc_port}", "--metrics-listen", f"127.0.0.1:{metrics_port}"]
        server = Server(checkout, env, args, run_dir / "quick-start-server.log")
        server.health_addr = f"http://127.0.0.1:{grpc_port}"
        server.start()
        total = ran = skipped = 0
        failed = []
        try:
            for doc in docs():
                for line, runnable, code in snippets(doc):
                    total += 1
                    if not runnable:
                        continue
                    where = f"{doc.relative_to(ROOT)}:{line}"
                    if free_ports:
                        code = re.sub(r"\b(localhost|127\.0\.0\.1):50051\b", f"127.0.0.1:{grpc_port}", code)
                        code = re.sub(r"\b(localhost|127\.0\.0\.1):9464\b", f"127.0.0.1:{metrics_port}", code)
                    missing = [t for t in TOOLS if re.search(rf"(^|[\s|;&(]){re.escape(t)}\s", code)
                               and shutil.which(t, path=env["PATH"]) is None]
                    if missing and not require_tools:
                        skipped += 1
                        print(f"skip {where}: {', '.join(missing)} not installed (scripts/install-tools.sh)")
                        continue
                    ran += 1
                    problem = own_server_problem(code)
                    if problem:
                        failed.append(where)
                        print(f"FAIL {where}: the snippet {problem}\n--- snippet:\n{code}---")
                        continue
                    before = files_of(checkout)
                    t0 = time.monotonic()
                    status, output, left_running = run_snippet(code, checkout, env)
                    took = time.monotonic() - t0
                    after = files_of(checkout)
                    left = sorted(set(after) - set(before))
                    changed = sorted(k for k in before if k in after and after[k] != before[k])
                    problems = []
                    if status != 0:
                        problems.append(f"exit {status}")
                    if left_running:
                        problems.append("left processes running (stop the server it started: kill \"$server\")")
                    if left:
                        problems.append("left in the checkout: " + ", ".join(left))
                    if changed:
                        problems.append("changed in the checkout: " + ", ".join(changed))
                    if not server.alive() or not server.serving():
                        problems.append("the quick start's server is no longer serving")
                    for k in left:
                        (checkout / k).unlink(missing_ok=True)
                    if not problems:
                        print(f"ok   {where} ({took:.1f} s)")
                    else:
                        failed.append(where)
                        print(f"FAIL {where} ({'; '.join(problems)}, {took:.1f} s)\n"
                              f"--- snippet:\n{code}--- output:\n{output}---")
                        if not server.alive():
                            server.start()
        finally:
            server.stop()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

    runnable = ran + skipped
    print(f"doc-snippets: {total} shell snippets, {runnable} runnable: {ran - len(failed)} passed, "
          f"{len(failed)} failed, {skipped} skipped ({time.monotonic() - started:.1f} s)")
    if runnable < MIN_RUNNABLE:
        print(f"doc-snippets: only {runnable} runnable snippets (expected at least {MIN_RUNNABLE}): "
              "were the `sh runnable` markers lost?", file=sys.stderr)
        return 1
    if failed:
        print("doc-snippets: failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    if skipped and require_tools:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
