#!/usr/bin/env bash
# Byte-identical outputs before/after a refactor of the trace codec.
#   scripts/check-identical.sh record DIR   # write reference outputs into DIR
#   scripts/check-identical.sh check DIR    # regenerate into a temp dir and `cmp` against DIR
# Covers: `gputrace demo` traces, `import` of the Kineto traces in ../shared/traces,
# `export` (Perfetto, Chrome JSON, Parquet) and `report --json` of both.
# GPUTRACE_BIN picks the binary (default target/debug/gputrace).
set -euo pipefail
mode=${1:?record|check}; ref=${2:?reference directory}
cd "$(dirname "$0")/.."
bin=${GPUTRACE_BIN:-target/debug/gputrace}
traces=../shared/traces
[ -x "$bin" ] || { echo "no $bin: build it first" >&2; exit 2; }

generate() {
    local out=$1
    mkdir -p "$out/demo" "$out/import" "$out/export" "$out/report"
    "$bin" demo -o "$out/demo" --ranks 2 --steps 4 --layers 4 >/dev/null
    "$bin" demo -o "$out/demo-default" >/dev/null
    local i=0
    while IFS= read -r f; do
        i=$((i + 1))
        "$bin" import -o "$out/import/k$i.gtrace" "$f" >/dev/null 2>&1 || echo "import failed: $f" >"$out/import/k$i.failed"
    done < <(find "$traces" -name '*.json.gz' | sort)
    local t
    for t in "$out"/demo/*.gtrace "$out"/demo-default/*.gtrace "$out"/import/*.gtrace; do
        local n; n=$(basename "$(dirname "$t")")-$(basename "$t" .gtrace)
        "$bin" export --format perfetto -o "$out/export/$n.pftrace" "$t" >/dev/null 2>&1 || true
        "$bin" export --format chrome -o "$out/export/$n.json" "$t" >/dev/null 2>&1 || true
        "$bin" export --format parquet --job ref -o "$out/export/$n.parquet/" "$t" >/dev/null 2>&1 || true
        "$bin" report --json "$t" >"$out/report/$n.json" 2>&1 || true
    done
    "$bin" report --json "$out/demo" >"$out/report/demo-all.json" 2>&1 || true
    "$bin" export --format chrome -o "$out/export/demo-all.json" "$out/demo" >/dev/null 2>&1 || true
}

# Outputs name their input paths (reports, the demo's HTML), so both modes generate at one fixed path.
tmp=${TMPDIR:-/tmp}/gputrace-check-identical
rm -rf "$tmp"; trap 'rm -rf "$tmp"' EXIT
generate "$tmp"
case $mode in
record) rm -rf "$ref"; mkdir -p "$(dirname "$ref")"; cp -r "$tmp" "$ref"; find "$ref" -type f | wc -l | sed 's/$/ files recorded/' ;;
check)
    diff <(cd "$ref" && find . -type f | sort) <(cd "$tmp" && find . -type f | sort)
    n=0; bad=0
    while IFS= read -r f; do
        n=$((n + 1))
        cmp -s "$ref/$f" "$tmp/$f" || { echo "DIFFERS: $f"; bad=$((bad + 1)); }
    done < <(cd "$ref" && find . -type f | sort)
    echo "$n files compared, $bad differ"; [ "$bad" = 0 ] ;;
*) echo "mode: record or check" >&2; exit 2 ;;
esac
