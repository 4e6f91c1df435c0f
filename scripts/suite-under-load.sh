#!/usr/bin/env bash
# Runs the whole test suite ROUNDS times in a row (default 3) with HOGS
# busy-looping processes (default 2, one per core of a CI-like machine) beside
# it, to show that no test races a slow machine. Prints one line per round and
# exits non-zero at the first failing round (its log is kept).
# Usage: scripts/suite-under-load.sh   (ROUNDS=3 HOGS=2)
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
hogs=${HOGS:-2}
cargo build --workspace --all-targets --quiet || exit 1
pids=()
for _ in $(seq "$hogs"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
for r in $(seq "$rounds"); do
    log=$(mktemp -t suite-round-XXXX.log)
    start=$(date +%s)
    if cargo test --workspace >"$log" 2>&1; then
        echo "round $r: passed in $(( $(date +%s) - start )) s ($(grep -c '^test result: ok' "$log") test binaries, $hogs CPU hogs, load $(cut -d' ' -f1 /proc/loadavg))"
        rm -f "$log"
    else
        echo "round $r: FAILED after $(( $(date +%s) - start )) s; log: $log"
        grep -E "^test .* FAILED|panicked" "$log" | head -20
        exit 1
    fi
done
