#!/usr/bin/env bash
# The operator console in a real browser (scripts/ui-check.py): installs
# what it needs when missing — Debian's chromium and chromium-driver (the
# only browser reachable here: Playwright's and Selenium Manager's
# downloads are not), and Selenium in a venv under target/ (kept, so a
# second run downloads nothing) — then runs the check against the debug
# binary `cargo test` built (or the one given with --binary). Recommended
# packages are left out, so the one font chromium recommends is named.
#
#   scripts/ui-check.sh [--binary PATH] [--screenshot docs/ui-console.png]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "ui-check: needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver)" >&2
    exit 1
  fi
  echo "ui-check: apt-get install chromium chromium-driver fonts-liberation"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-liberation >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-liberation >/dev/null; }
fi
chromium --version 2>/dev/null | head -n 1
chromedriver --version | head -n 1

venv="$root/target/ui-venv"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import selenium' 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q 'selenium>=4.20,<5'
fi
# Selenium must not try to fetch a driver or browser of its own.
export SE_OFFLINE=true
exec "$venv/bin/python" "$root/scripts/ui-check.py" "$@"
