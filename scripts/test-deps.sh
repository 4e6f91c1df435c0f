#!/usr/bin/env bash
# What the tests that use a real component need (Perfetto's schema, the real
# libcupti, librsvg, PyTorch, Chromium, DuckDB, TensorBoard's plugin and HTA,
# Prometheus, a pseudo-terminal), installed best effort: a failed install
# says so and goes on. Called by scripts/test.sh (the README's test
# command) and .ci/run. Each component is one `echo "== ..."` block naming
# the test that uses it; a new component is a new block here.
#
# Without a component its tests skip, and scripts/test.sh lists them at the
# end of the run; under CI=true they fail instead.
set -uo pipefail
cd "$(dirname "$0")/.."

echo "== Perfetto's official schema for the export validation test (best effort; the test skips without it)"
python3 -m pip install --quiet perfetto protobuf || echo "could not install perfetto/protobuf; the schema test will skip (listed at the end)"

echo "== real libcupti for the no-GPU agent tests (best effort; tests skip without it)"
scripts/fetch-cupti-wheels.sh || echo "could not fetch the CUPTI wheels; those tests will skip"

echo "== librsvg's rsvg-convert for the heatmap picture test (tests/compare.rs; under CI=true it fails without it)"
command -v rsvg-convert >/dev/null || { apt-get install -y -q librsvg2-bin >/dev/null 2>&1 || sudo apt-get install -y -q librsvg2-bin >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q librsvg2-bin >/dev/null 2>&1; } || echo "could not install librsvg2-bin"; }

echo "== PyTorch (CPU use of the PyPI wheel) for the optimizer-step hook tests (tests/python_hooks.rs; under CI=true they fail without it)"
python3 -m pip install --quiet "torch==2.13.0" || python3 -m pip install --quiet "torch==2.13.0" || echo "could not install torch"

echo "== Chromium for the HTML report's browser test (tests/html_report.rs; under CI=true it fails without it)"
if ! [ -x /usr/bin/chromium ]; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "could not install chromium"
fi

echo "== DuckDB (PyPI) for the Parquet export test (tests/parquet_duckdb.rs; under CI=true it fails without it)"
python3 -m pip install --quiet "duckdb==2.0.1" || python3 -m pip install --quiet duckdb || echo "could not install duckdb"

echo "== Apache Spark (PyPI pyspark, on Debian's OpenJDK 17) for the Parquet export's Spark test (tests/parquet_spark.rs; under CI=true it fails without them)"
command -v java >/dev/null || (apt-get install -y -qq openjdk-17-jre-headless >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }) || echo "could not install openjdk-17-jre-headless"
python3 -m pip install --quiet "pyspark==4.3.0" || python3 -m pip install --quiet pyspark || echo "could not install pyspark"

echo "== TensorBoard's PyTorch profiler plugin and HTA (PyPI) for the Kineto round-trip test (tests/kineto_viewers.rs; under CI=true it fails without them)"
python3 -m pip install --quiet "torch-tb-profiler==0.4.3" "HolisticTraceAnalysis==0.5.0" psutil || python3 -m pip install --quiet "torch-tb-profiler==0.4.3" "HolisticTraceAnalysis==0.5.0" psutil || echo "could not install torch-tb-profiler/HolisticTraceAnalysis"

echo "== Prometheus (Debian package: server and promtool) for the live metrics test (tests/metrics.rs; under CI=true it fails without it)"
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    (apt-get install -y -qq prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq prometheus >/dev/null; }) || echo "could not install prometheus"
fi
# The package's service is not wanted: the test starts its own server on loopback.
(systemctl stop prometheus prometheus-node-exporter 2>/dev/null || service prometheus stop 2>/dev/null) >/dev/null 2>&1 || true

echo "== prometheus_client (PyPI; the library vLLM and SGLang expose their metrics with) for the serving tests (tests/serving.rs; under CI=true they fail without it)"
python3 -m pip install --quiet "prometheus_client==0.26.0" || python3 -m pip install --quiet prometheus_client || echo "could not install prometheus_client"

echo "== util-linux's script (a pseudo-terminal) for the colour test of tests/hostile_names.rs (under CI=true it fails without it)"
command -v script >/dev/null || { apt-get install -y -qq bsdutils >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bsdutils >/dev/null; }; } || echo "could not install bsdutils (script)"

exit 0
