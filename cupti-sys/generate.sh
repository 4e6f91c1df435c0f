#!/usr/bin/env bash
# Regenerates the committed CUPTI bindings:
#   cupti-sys/src/bindings_v13.rs  from nvidia-cuda-cupti      13.5.25 (CUPTI_API_VERSION 130500)
#   cupti-sys/src/bindings_v12.rs  from nvidia-cuda-cupti-cu12 12.9.79 (CUPTI_API_VERSION 28)
#
# Usage:   cupti-sys/generate.sh            (from anywhere)
# Needs:   x86_64 Linux, python3 with pip, unzip, cargo, and libclang
#          (Debian/Ubuntu: apt-get install -y libclang-dev).
# Env:     CUPTI_GEN_DIR   wheel cache and unpacked headers (default /tmp/cupti-sys-gen)
#          CARGO_TARGET_DIR is honoured as usual.
#
# Idempotent: wheels are downloaded once into $CUPTI_GEN_DIR/wheels with pinned
# versions, and a rerun writes byte-identical files. The generator itself is
# cupti-sys/build.rs (feature `regenerate`); this script only fetches the
# headers and runs it once per header set. After regenerating, run
# `cargo test -p cupti-sys`: bindgen's layout assertions and tests/layouts.rs
# check the new files against the offsets the decoder relies on.
#
# Header sources (the CUDA toolkit is not needed):
#   13.x: nvidia-cuda-cupti (cupti*.h), nvidia-cuda-runtime (cuda.h),
#         nvidia-cuda-crt (crt/host_defines.h, which 13.x moved out of the runtime wheel)
#   12.x: nvidia-cuda-cupti-cu12, nvidia-cuda-runtime-cu12,
#         nvidia-cuda-nvcc-cu12 (crt/host_defines.h; only its include/ is unpacked)
set -euo pipefail

CUPTI13=13.5.25
RUNTIME13=13.5.37
CRT13=13.5.37
CUPTI12=12.9.79
RUNTIME12=12.9.79
NVCC12=12.9.86

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gen="${CUPTI_GEN_DIR:-/tmp/cupti-sys-gen}"
mkdir -p "$gen/wheels" "$gen/x"

# unpack PACKAGE VERSION -> prints the directory its include/ files were unpacked to
unpack() {
    local pkg="$1" ver="$2" whl dest
    whl="$(ls "$gen/wheels/${pkg//-/_}-$ver-"*.whl 2>/dev/null | head -n1 || true)"
    if [[ -z "$whl" ]]; then
        python3 -m pip download --quiet --no-deps --dest "$gen/wheels" "$pkg==$ver" >&2
        whl="$(ls "$gen/wheels/${pkg//-/_}-$ver-"*.whl | head -n1)"
    fi
    dest="$gen/x/$pkg-$ver"
    if [[ ! -d "$dest" ]]; then
        unzip -q -o "$whl" 'nvidia/*/include/*' -d "$dest.tmp" >&2
        mv "$dest.tmp" "$dest"
    fi
    echo "$dest"
}

# incdir DIR FILE -> the include directory under DIR that holds FILE
incdir() {
    local hit
    hit="$(find "$1" -path "*/include/$2" | head -n1)"
    [[ -n "$hit" ]] || { echo "generate.sh: $2 not found under $1" >&2; exit 1; }
    echo "${hit%/"$2"}"
}

# run_bindgen DEST LABEL CUPTI_INCLUDE EXTRA_INCLUDES
# build.rs writes into $gen first, then cargo compiles the crate against the
# files still in src/ (which may fail when those are stale: tolerated, the
# final `cargo check` judges the new ones). A bindgen failure leaves src/ as is.
run_bindgen() {
    local dest="$1" label="$2" cupti="$3" extra="$4" tmp
    tmp="$gen/$(basename "$dest")"
    rm -f "$tmp"
    echo "generate.sh: $label -> $dest" >&2
    CUPTI_INCLUDE_DIR="$cupti" \
    CUPTI_EXTRA_INCLUDE_DIRS="$extra" \
    CUPTI_BINDINGS_LABEL="$label" \
    CUPTI_BINDINGS_OUT="$tmp" \
        cargo build --quiet --manifest-path "$here/Cargo.toml" -p cupti-sys --features regenerate \
        || echo "generate.sh: cargo failed (above); fine if only the old files failed to compile" >&2
    [[ -s "$tmp" ]] || { echo "generate.sh: $tmp was not written" >&2; exit 1; }
    cp "$tmp" "$dest"
}

# The 12.x cupti_profiler_host.h includes C++'s <string> (and uses nothing
# from it); bindgen parses C, so an empty stand-in is put on the include path.
stub="$gen/stub"
mkdir -p "$stub"
: > "$stub/string"

c13="$(unpack nvidia-cuda-cupti "$CUPTI13")"
r13="$(unpack nvidia-cuda-runtime "$RUNTIME13")"
t13="$(unpack nvidia-cuda-crt "$CRT13")"
run_bindgen "$here/src/bindings_v13.rs" \
    "nvidia-cuda-cupti $CUPTI13 (+ nvidia-cuda-runtime $RUNTIME13, nvidia-cuda-crt $CRT13)" \
    "$(incdir "$c13" cupti.h)" \
    "$(incdir "$r13" cuda.h):$(incdir "$t13" crt/host_defines.h)"

c12="$(unpack nvidia-cuda-cupti-cu12 "$CUPTI12")"
r12="$(unpack nvidia-cuda-runtime-cu12 "$RUNTIME12")"
n12="$(unpack nvidia-cuda-nvcc-cu12 "$NVCC12")"
run_bindgen "$here/src/bindings_v12.rs" \
    "nvidia-cuda-cupti-cu12 $CUPTI12 (+ nvidia-cuda-runtime-cu12 $RUNTIME12, nvidia-cuda-nvcc-cu12 $NVCC12)" \
    "$(incdir "$c12" cupti.h)" \
    "$(incdir "$r12" cuda.h):$(incdir "$n12" crt/host_defines.h):$stub"

cargo check --quiet --manifest-path "$here/Cargo.toml" -p cupti-sys --all-targets
echo "generate.sh: done; now run: cargo test -p cupti-sys" >&2
