#!/usr/bin/env python3
"""Runs the documentation's runnable shell snippets, so the docs stay true.

Extracts every shell snippet (a fence opening with ```sh, ```bash or
```shell) from README.md and examples/**/README.md, and runs those whose
fence says `runnable` (```sh runnable) as a newcomer would:

- retryd is built (`cargo build --bin retryd`, the debug binary `cargo test`
  already built, so in CI this is a no-op) and put on PATH as `retryd`, as
  `cargo install --path .` would;
- each snippet runs with `bash -euo pipefail` in a temporary copy of the
  files the docs refer to (examples/, policies/, proto/);
- `retryd serve --policy examples/policies`, as the README starts it, runs in
  the background on free ports; a snippet's `localhost:50051` /
  `127.0.0.1:50051` and `:9464` are pointed at them, and RETRYD_LISTEN,
  RETRYD_METRICS_LISTEN and RETRYD_HEALTH_ADDR name them, so `retryd serve`
  and `retryd health` in a snippet use them too. A snippet that starts its
  own `retryd serve` runs while the background server is stopped.

A snippet that fails (non-zero exit, or over its time limit) fails the run.
A snippet that needs grpcurl, ghz, grpc_health_probe or curl when it is not
installed fails too when REQUIRE_TOOLS=1 (as .ci/run sets, after installing
them), and is skipped otherwise.

    python3 scripts/doc-snippets.py            # from anywhere
    RETRYD_BIN=path/to/retryd python3 scripts/doc-snippets.py
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
TOOLS = ["grpcurl", "ghz", "grpc_health_probe", "curl"]
SNIPPET_TIMEOUT_S = 120
# A refactor that drops the markers must not pass by running nothing.
MIN_RUNNABLE = 8


def docs():
    skip = {"node_modules", ".venv", "target"}
    found = [ROOT / "README.md"]
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build():
    if os.environ.get("RETRYD_BIN"):
        return Path(os.environ["RETRYD_BIN"]).resolve()
    subprocess.run(
        ["cargo", "build", "--quiet", "--bin", "retryd", "--manifest-path", str(ROOT / "Cargo.toml")],
        check=True,
    )
    target = os.environ.get("CARGO_TARGET_DIR") or str(ROOT / "target")
    return Path(target).resolve() / "debug" / "retryd"


class Server:
    """`retryd serve --policy examples/policies` in the background."""

    def __init__(self, workdir, env, grpc_port):
        self.workdir, self.env, self.grpc_port = workdir, env, grpc_port
        self.proc = None

    def start(self):
        self.log = open(self.workdir / "background-server.log", "ab")
        self.proc = subprocess.Popen(
            ["retryd", "serve", "--policy", "examples/policies"],
            cwd=self.workdir, env=self.env, stdout=self.log, stderr=self.log,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"doc-snippets: the background retryd serve exited {self.proc.returncode}:\n"
                         + (self.workdir / "background-server.log").read_text(errors="replace"))
            probe = subprocess.run(["retryd", "health", "--timeout", "1s"], env=self.env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if probe.returncode == 0:
                return
            time.sleep(0.2)
        self.stop()
        sys.exit("doc-snippets: the background retryd serve did not become SERVING within 60 s")

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
    started = time.monotonic()
    require_tools = os.environ.get("REQUIRE_TOOLS") == "1"
    binary = build()
    if not binary.is_file():
        sys.exit(f"doc-snippets: no retryd binary at {binary}")

    work = Path(tempfile.mkdtemp(prefix="retryd-doc-snippets."))
    try:
        for d in ["examples", "policies", "proto"]:
            shutil.copytree(ROOT / d, work / d, symlinks=True,
                            ignore=shutil.ignore_patterns("node_modules", ".venv", "__pycache__"))
        bindir = work / ".bin"
        bindir.mkdir()
        (bindir / "retryd").symlink_to(binary)
        grpc_port, metrics_port = free_port(), free_port()
        env = dict(os.environ)
        env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
        env["RETRYD_LISTEN"] = f"127.0.0.1:{grpc_port}"
        env["RETRYD_METRICS_LISTEN"] = f"127.0.0.1:{metrics_port}"
        env["RETRYD_HEALTH_ADDR"] = f"http://127.0.0.1:{grpc_port}"
        for var in ["RETRYD_POLICY", "RUST_LOG"]:
            env.pop(var, None)

        server = Server(work, env, grpc_port)
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
                    code = re.sub(r"\b(localhost|127\.0\.0\.1):50051\b", f"127.0.0.1:{grpc_port}", code)
                    code = re.sub(r"\b(localhost|127\.0\.0\.1):9464\b", f"127.0.0.1:{metrics_port}", code)
                    missing = [t for t in TOOLS if re.search(rf"(^|[\s|;&(]){re.escape(t)}\s", code)
                               and shutil.which(t, path=env["PATH"]) is None]
                    if missing and not require_tools:
                        skipped += 1
                        print(f"skip {where}: {', '.join(missing)} not installed (scripts/install-tools.sh)")
                        continue
                    own_server = re.search(r"(^|\s)retryd serve\b", code, re.M) is not None
                    if own_server:
                        server.stop()
                    t0 = time.monotonic()
                    try:
                        result = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                timeout=SNIPPET_TIMEOUT_S)
                        status, output = result.returncode, result.stdout.decode(errors="replace")
                    except subprocess.TimeoutExpired as e:
                        status = f"timed out after {SNIPPET_TIMEOUT_S} s"
                        output = (e.stdout or b"").decode(errors="replace")
                    finally:
                        if own_server:
                            server.start()
                    ran += 1
                    took = time.monotonic() - t0
                    if status == 0:
                        print(f"ok   {where} ({took:.1f} s)")
                    else:
                        failed.append(where)
                        print(f"FAIL {where} (exit {status}, {took:.1f} s)\n--- snippet:\n{code}--- output:\n{output}---")
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

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
