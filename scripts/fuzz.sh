#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for DURATION seconds each (default
# 30), one after the other, single-process, so the machine stays usable.
#
#   scripts/fuzz.sh [SECONDS]
#
# Exits non-zero if a target crashes (panics, times out on one input, or runs
# out of memory); libFuzzer prints the reproducer's path, which lands in
# fuzz/artifacts/<target>/. Reproduce with
#   cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>
# New inputs go to fuzz/target/corpus/<target>/ (not committed); the seeds
# committed under fuzz/corpus/<target>/ are only read.
#
# Needs a nightly toolchain (libFuzzer's sanitizer flags); installs
# cargo-fuzz with `cargo install cargo-fuzz --locked` if it is missing.
# Builds are release with debug assertions and overflow checks (cargo-fuzz's
# default), so an arithmetic overflow is a crash too; runs of at most 300 s
# build without a sanitizer, longer ones with AddressSanitizer (see below).
set -euo pipefail

DURATION="${1:-30}"
case "$DURATION" in
  '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
TARGETS=(classify_request policy_file)
# A short run (CI's 20 s) is tuned for inputs per second: no sanitizer and
# the vanilla schedule (both explained below); longer runs are not.
SHORT=false
((DURATION <= 300)) && SHORT=true
TOOLCHAIN="${FUZZ_TOOLCHAIN:-nightly}"

cd "$(dirname "$0")/.."

if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
  echo "fuzz.sh: the $TOOLCHAIN toolchain is missing: rustup toolchain install $TOOLCHAIN" >&2
  exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz" >&2
  timeout 1800 cargo install cargo-fuzz --locked
fi

# Sanitizer. Short runs (CI's 20 s) build without one: the crate forbids
# unsafe code, so what ASan alone could find is a memory error in a
# dependency's unsafe code, while safe Rust's bounds checks, debug
# assertions and overflow checks (all kept) already turn the errors a
# harness reaches in our code into crashes. Without ASan's instrumentation
# policy_file ran 3-4x the inputs in 20 s (41 000-48 000 against
# 11 400-17 200, three paired runs), and the corpus it left, replayed by
# one same binary, reached more coverage (5 408-5 495 edges against
# 5 154-5 250). Runs longer than 300 s keep AddressSanitizer (and its leak
# check) for the dependencies' unsafe code. FUZZ_SANITIZER overrides.
SANITIZER="${FUZZ_SANITIZER:-address}"
[ -z "${FUZZ_SANITIZER:-}" ] && $SHORT && SANITIZER=none

# Build once, bounded; `fuzz run` then reuses the artifacts (built with the
# same sanitizer, or it would build again).
timeout 3600 cargo "+$TOOLCHAIN" fuzz build --sanitizer "$SANITIZER"
echo "fuzz.sh: targets built with --sanitizer $SANITIZER" >&2

status=0
for target in "${TARGETS[@]}"; do
  work="fuzz/target/corpus/$target"
  mkdir -p "$work" "fuzz/artifacts/$target"
  echo "fuzz.sh: $target for ${DURATION}s" >&2
  # -timeout: one input running over 10 s is a hang; -rss_limit_mb: a leak
  # or a blow-up is a crash; the outer timeout bounds everything else.
  # classify_request: -detect_leaks=0. The service keeps ClassifyBatch
  # storage in bounded pools across calls (src/grpc/wire/pool.rs), so most inputs
  # end with more mallocs than frees; libFuzzer then runs LeakSanitizer after
  # that input, which slowed the target from ~22 000 to ~3 700 execs/s while
  # finding nothing (the pools are reachable from statics). Unbounded growth
  # is still caught by -rss_limit_mb.
  leaks=()
  [ "$target" = classify_request ] && leaks=(-detect_leaks=0)
  # A short run (CI's 20 s) starts from the seeds alone and finds new
  # coverage on most inputs; libFuzzer then spent more time collecting
  # features for its entropic schedule (43 % of a policy_file run under
  # perf, AddRareFeature alone 25 %) than in the target (26 %), and the
  # vanilla schedule reached as much coverage in 20 s on 1.9x the inputs
  # (policy_file, 3 paired runs: cov 6973-7228 against 6845-7050). Longer
  # runs keep the entropic schedule, which pays off once coverage plateaus.
  schedule=()
  $SHORT && schedule=(-entropic=0)
  # With ASan: no allocation stack traces and without fake stacks for
  # use-after-return (which safe Rust cannot do): heap errors are still
  # caught; rerun a reproducer without ASAN_OPTIONS for full reports.
  if ! ASAN_OPTIONS="${ASAN_OPTIONS:-malloc_context_size=0:detect_stack_use_after_return=0}" \
    timeout -k 30 "$((DURATION + 300))" cargo "+$TOOLCHAIN" fuzz run --sanitizer "$SANITIZER" "$target" "$work" "fuzz/corpus/$target" -- \
    -max_total_time="$DURATION" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${leaks[@]}" "${schedule[@]}"; then
    echo "fuzz.sh: $target FAILED (see fuzz/artifacts/$target/)" >&2
    status=1
  fi
done
exit "$status"
