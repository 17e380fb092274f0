#!/usr/bin/env bash
# Builds the Dockerfile's runtime image with buildah and runs it the way a
# container runtime would, without a registry or a container engine:
#
#   1. debootstrap (--variant=minbase, Debian 12, with ca-certificates)
#      stands in for debian:bookworm-slim, which lives on a registry this
#      machine cannot reach; it is imported into a private buildah store
#      under that very name, so the Dockerfile is built unchanged;
#   2. buildah bud --format docker --build-arg BINARY=prebuilt, with a
#      context holding only the binary given (CI's debug one, built once by
#      cargo test: what is checked is the image, not the build profile);
#   3. checks the image config: user 10001, STOPSIGNAL SIGTERM, the
#      HEALTHCHECK (kept by --format docker), the OCI labels; and that the
#      root filesystem has no shell;
#   4. mounts the image's root filesystem and runs its ENTRYPOINT+CMD as
#      PID 1 of a new PID namespace, as user 10001, chrooted, in a private
#      network namespace; runs the HEALTHCHECK's command (must pass), sends
#      SIGTERM, checks the health command now fails (NOT_SERVING during the
#      shutdown delay) and the exit status is 0.
#
#   scripts/image-check.sh [path/to/retryd]      (default target/release/retryd)
#
# Root only (debootstrap, chroot, namespaces). Everything lives in a
# temporary directory removed at the end (~800 MB while it runs: vfs layers).
# Nothing is cached across runs. Measured on the shared 2-core machine under
# load: 254 s, of which debootstrap 214 s, buildah bud 32 s, the run 6 s (the
# image's default 5 s shutdown delay); debootstrap takes about 1 minute on
# an idle machine with a near mirror.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
binary="${1:-${CARGO_TARGET_DIR:-$root/target}/release/retryd}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
started=$SECONDS

say() { printf 'image-check: %s\n' "$*"; }
fail() { printf 'image-check: FAIL: %s\n' "$*" >&2; exit 1; }
[[ -x "$binary" ]] || fail "no binary at $binary (build it with cargo build --release)"
[[ $EUID -eq 0 ]] || fail "needs root (debootstrap, chroot, namespaces)"

need=()
for tool in buildah debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
if ((${#need[@]})); then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
fi

work="$(mktemp -d /tmp/retryd-image-check.XXXXXX)"
store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
server_pid=""
cleanup() {
  [[ -n "$server_pid" ]] && kill -KILL "$server_pid" 2>/dev/null || true
  umount "$work/mnt/proc" 2>/dev/null || true
  # The store is private to this run: dropping its directory drops it all.
  buildah "${store[@]}" unmount --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The Debian stand-in.
t=$SECONDS
say "debootstrap bookworm (minbase) from $mirror"
debootstrap --variant=minbase --include=ca-certificates bookworm "$work/debian" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
tar -C "$work/debian" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf "$work/debian.tar" .
rm -rf "$work/debian"
mkdir -p "$work/base"
mv "$work/debian.tar" "$work/base/"
printf 'FROM scratch\nADD debian.tar /\nCMD ["bash"]\n' >"$work/base/Containerfile"
buildah "${store[@]}" bud --quiet --isolation chroot -f "$work/base/Containerfile" \
  -t docker.io/library/debian:bookworm-slim "$work/base" >/dev/null
rm -rf "$work/base"
say "Debian base ready in $((SECONDS - t)) s"

# 2. The image, from the Dockerfile unchanged.
t=$SECONDS
mkdir -p "$work/context"
cp "$binary" "$work/context/retryd"
revision="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
buildah "${store[@]}" bud --quiet --isolation chroot --format docker --pull=false \
  --build-arg BINARY=prebuilt --build-arg RETRYD_REVISION="$revision" \
  -f "$root/Dockerfile" -t localhost/retryd:check "$work/context" >"$work/bud.log" 2>&1 \
  || { cat "$work/bud.log" >&2; fail "buildah bud"; }
say "image built in $((SECONDS - t)) s"

# 3. The image's config.
config="$(buildah "${store[@]}" inspect --type image localhost/retryd:check)"
python3 - "$config" <<'PY' || fail "image config"
import json, sys
c = json.loads(sys.argv[1])
d = c["Docker"]["config"]
problems = []
if d.get("User") != "10001:10001": problems.append(f"User {d.get('User')!r}")
if d.get("StopSignal") != "SIGTERM": problems.append(f"StopSignal {d.get('StopSignal')!r}")
hc = (d.get("Healthcheck") or {}).get("Test") or []
if hc[:2] != ["CMD", "/usr/local/bin/retryd"]: problems.append(f"Healthcheck {hc!r}")
labels = d.get("Labels") or {}
for k in ["org.opencontainers.image.title", "org.opencontainers.image.version",
          "org.opencontainers.image.revision", "org.opencontainers.image.licenses"]:
    if not labels.get(k): problems.append(f"label {k} missing")
if problems:
    sys.exit("image-check: " + "; ".join(problems))
print("image-check: config: user", d["User"], "stop", d["StopSignal"], "health", " ".join(hc[1:]))
print("image-check: entrypoint", d.get("Entrypoint"), "cmd", d.get("Cmd"))
PY
entrypoint=($(buildah "${store[@]}" inspect --type image --format '{{range .Docker.Config.Entrypoint}}{{.}} {{end}}' localhost/retryd:check))
cmd=($(buildah "${store[@]}" inspect --type image --format '{{range .Docker.Config.Cmd}}{{.}} {{end}}' localhost/retryd:check))
health=($(buildah "${store[@]}" inspect --type image --format '{{range .Docker.Config.Healthcheck.Test}}{{.}} {{end}}' localhost/retryd:check))
health=("${health[@]:1}") # drop "CMD"

# 4. Run it.
ctr="$(buildah "${store[@]}" from --pull=false localhost/retryd:check)"
rootfs="$(buildah "${store[@]}" mount "$ctr")"
ln -s "$rootfs" "$work/mnt"
[[ ! -e "$rootfs/bin/sh" && ! -e "$rootfs/usr/bin/sh" ]] || fail "the runtime image has a shell"
say "root filesystem: $(du -sh "$rootfs" | cut -f1), $(find "$rootfs" -type f | wc -l) files"
mkdir -p "$rootfs/proc"

# A private network namespace (only loopback: no port clash with the host)
# holding the server (PID 1 of its own PID namespace) and the probes.
cat >"$work/run.sh" <<RUN
set -u
ip link set lo up
unshare --pid --fork --mount sh -c 'mount -t proc proc "$rootfs/proc" && exec chroot --userspec=10001:10001 "$rootfs" ${entrypoint[*]} ${cmd[*]}' >"$work/server.log" 2>&1 &
outer=\$!
ok=0
for _ in \$(seq 1 100); do
  if chroot --userspec=10001:10001 "$rootfs" ${health[*]} >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.1
done
[ \$ok = 1 ] || { echo "health command never passed"; kill -KILL \$outer; exit 10; }
echo "health command passed: ${health[*]}"
pid1=\$(pgrep -P \$outer | head -1)
grep -q '^NSpid:.*[[:space:]]1\$' /proc/\$pid1/status && echo "the server is PID 1 of its namespace" || { echo "not PID 1"; exit 11; }
[ "\$(awk '/^Uid:/ {print \$2}' /proc/\$pid1/status)" = 10001 ] && echo "running as uid 10001" || { echo "not uid 10001"; exit 12; }
kill -TERM \$pid1
sleep 0.5
if chroot --userspec=10001:10001 "$rootfs" ${health[*]} >/dev/null 2>&1; then echo "health still passes after SIGTERM"; exit 13; fi
echo "health command fails after SIGTERM (NOT_SERVING during the shutdown delay)"
wait \$outer
status=\$?
echo "exit status after SIGTERM: \$status"
exit \$status
RUN
t=$SECONDS
if ! timeout 60 unshare --net bash "$work/run.sh"; then
  sed 's/^/  server: /' "$work/server.log" >&2
  fail "running the image"
fi
grep -q '"stopped"' "$work/server.log" || grep -q 'stopped' "$work/server.log" || fail "no 'stopped' in the log"
say "ran as PID 1 and stopped cleanly in $((SECONDS - t)) s"
umount "$rootfs/proc" 2>/dev/null || true
say "OK in $((SECONDS - started)) s"
