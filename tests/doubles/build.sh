#!/bin/sh
# Build the GPU-free test doubles with gcc only (no CUDA headers needed).
#   tests/doubles/build.sh OUTDIR
# Produces:
#   OUTDIR/libcuda.so.1 (+ libcuda.so)           fake driver (fake_cuda.c)
#   OUTDIR/cupti12/libcupti.so.12 (+ libcupti.so) fake CUPTI 12.x ABI
#   OUTDIR/cupti13/libcupti.so.13 (+ libcupti.so) fake CUPTI 13.x ABI (+ _v2)
#                                                both with PM sampling (fake_pmsampling.c)
#   OUTDIR/cupti13-nopm/libcupti.so.13           the 13.x fake without PM sampling
#                                                (a CUPTI older than 12.6 for that API)
#   OUTDIR/testprog                              links OUTDIR/libcuda.so.1 (rpath)
#   OUTDIR/nvtxprog                              NVTX job (vendored nvtx3 headers, no libcuda link)
#   OUTDIR/selftest_agent.so                     minimal injection agent (selftest)
#   OUTDIR/nvml/libnvidia-ml.so.1                fake NVML (fake_nvml.c); in its own
#                                                directory, found only when named
# cupti_layouts.h is committed; regenerate it with gen_layouts.py.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
CC=${CC:-gcc}
CFLAGS="-O1 -g -fPIC -pthread -Wall -Werror -fvisibility=hidden"
mkdir -p "$OUT/cupti12" "$OUT/cupti13" "$OUT/cupti13-nopm" "$OUT/nvml"

$CC $CFLAGS -shared -Wl,-soname,libcuda.so.1 -o "$OUT/libcuda.so.1" "$SRC/fake_cuda.c" -ldl &
p1=$!
$CC $CFLAGS -DFAKE_CUPTI_MAJOR=12 -shared -Wl,-soname,libcupti.so.12 \
    -o "$OUT/cupti12/libcupti.so.12" "$SRC/fake_cupti.c" "$SRC/fake_pmsampling.c" -ldl &
p2=$!
$CC $CFLAGS -DFAKE_CUPTI_MAJOR=13 -shared -Wl,-soname,libcupti.so.13 \
    -o "$OUT/cupti13/libcupti.so.13" "$SRC/fake_cupti.c" "$SRC/fake_pmsampling.c" -ldl &
p3=$!
$CC $CFLAGS -DFAKE_CUPTI_MAJOR=13 -shared -Wl,-soname,libcupti.so.13 \
    -o "$OUT/cupti13-nopm/libcupti.so.13" "$SRC/fake_cupti.c" -ldl &
p6=$!
$CC $CFLAGS -shared -o "$OUT/selftest_agent.so" "$SRC/selftest_agent.c" -ldl &
p4=$!
$CC $CFLAGS -shared -Wl,-soname,libnvidia-ml.so.1 -o "$OUT/nvml/libnvidia-ml.so.1" "$SRC/fake_nvml.c" &
p5=$!
wait $p1
ln -sf libcuda.so.1 "$OUT/libcuda.so"
$CC -O1 -g -pthread -Wall -Werror -o "$OUT/testprog" "$SRC/testprog.c" \
    -L"$OUT" -l:libcuda.so.1 -Wl,-rpath,"$OUT" -ldl
$CC -O1 -g -pthread -Wall -Werror -I"$SRC/nvtx3" -o "$OUT/nvtxprog" "$SRC/nvtxprog.c" -ldl
wait $p2
wait $p3
wait $p4
wait $p5
wait $p6
ln -sf libcupti.so.12 "$OUT/cupti12/libcupti.so"
ln -sf libcupti.so.13 "$OUT/cupti13/libcupti.so"
