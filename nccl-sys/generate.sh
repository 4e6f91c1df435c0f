#!/usr/bin/env bash
# Regenerates the committed NCCL profiler-plugin bindings:
#   nccl-sys/src/bindings.rs  from NVIDIA/nccl $NCCL_COMMIT (NCCL 2.30.7),
#   headers plugins/profiler/example/nccl/*.h (profiler.h pulls in v1..v6)
#
# Usage:   nccl-sys/generate.sh [NCCL_GIT_DIR]        (from anywhere)
#   NCCL_GIT_DIR  any clone or bare mirror of NVIDIA/nccl that contains
#                 $NCCL_COMMIT (e.g. /work/.mirror/NVIDIA+nccl/repo); the
#                 headers are read from it with `git show`, its work tree
#                 (if any) is not used. Also taken from $NCCL_REPO.
#   without it    the one pinned commit is fetched from
#                 https://github.com/NVIDIA/nccl into $NCCL_GEN_DIR/nccl.git,
#                 the shallow equivalent of `git clone --depth 1` at a commit:
#                 `git init --bare` + `git fetch --depth 1 origin <sha>`
#                 (GitHub serves fetches by full commit id). Reused on reruns.
# Needs:   git, the bindgen CLI ($BINDGEN, default `bindgen`; the committed
#          file was made by bindgen-cli 0.73.2: `cargo install bindgen-cli
#          --version 0.73.2 --locked`) and libclang (Debian/Ubuntu:
#          apt-get install -y libclang-dev clang).
# Env:     NCCL_GEN_DIR  scratch space (default /tmp/nccl-sys-gen): the
#                        extracted headers end up in $NCCL_GEN_DIR/headers,
#                        which is what tests/offsets.c is compiled against.
#          BINDGEN       the bindgen executable (default: bindgen)
#          NCCL_URL      where to fetch from when no repository is given
#                        (default https://github.com/NVIDIA/nccl; any git URL
#                        that serves the pinned commit, e.g. file:///path)
#
# Idempotent: the same commit and bindgen version give a byte-identical file
# (prettyplease formatting, no paths or dates in the output); the script
# says whether bindings.rs changed. It also compiles tests/offsets.c against
# the same headers (with $CC, default cc) and writes its output to
# tests/offsets.txt. After regenerating, run `cargo test -p nccl-sys`:
# bindgen's compile-time layout assertions and tests/layout.rs (offsets
# pinned from tests/offsets.txt) catch ABI changes.
set -euo pipefail

NCCL_COMMIT=5067397c2676d5aed50042fc39e5c8ee96eb0027
NCCL_VERSION=2.30.7            # makefiles/version.mk at that commit
NCCL_HOME=https://github.com/NVIDIA/nccl   # provenance written into the file
NCCL_URL="${NCCL_URL:-$NCCL_HOME}"         # where step 1 fetches from
HEADER_DIR=plugins/profiler/example/nccl
HEADERS=(common.h err.h types.h profiler.h
         profiler_v1.h profiler_v2.h profiler_v3.h profiler_v4.h profiler_v5.h profiler_v6.h
         profiler_net.h net_ib_v1.h net_socket_v1.h)
BINDGEN_VERSION=0.73.2         # the version the committed file was made with

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gen="${NCCL_GEN_DIR:-/tmp/nccl-sys-gen}"
bindgen="${BINDGEN:-bindgen}"
repo="${1:-${NCCL_REPO:-}}"
mkdir -p "$gen"

# --- 1. a git repository holding the pinned commit ---------------------------
if [[ -z "$repo" ]]; then
    repo="$gen/nccl.git"
    if ! git -C "$repo" cat-file -e "$NCCL_COMMIT^{commit}" 2>/dev/null; then
        echo "generate.sh: fetching $NCCL_URL $NCCL_COMMIT (depth 1) into $repo" >&2
        rm -rf "$repo"
        git init --quiet --bare "$repo"
        git -C "$repo" remote add origin "$NCCL_URL"
        git -C "$repo" fetch --quiet --depth 1 origin "$NCCL_COMMIT"
    fi
fi
git -C "$repo" cat-file -e "$NCCL_COMMIT^{commit}" 2>/dev/null || {
    echo "generate.sh: $repo does not contain commit $NCCL_COMMIT" >&2
    exit 1
}

# --- 2. the headers, fresh, plus a wrapper ------------------------------------
inc="$gen/headers"
rm -rf "$inc"
mkdir -p "$inc"
for h in "${HEADERS[@]}"; do
    git -C "$repo" show "$NCCL_COMMIT:$HEADER_DIR/$h" >"$inc/$h"
done
# err.h (ncclResult_t) and <sys/types.h> (pid_t) are what NCCL's own example
# plugin includes before profiler.h; profiler.h does not include them itself.
cat >"$inc/nccl_sys_wrapper.h" <<'WRAPPER'
/* Input to bindgen for nccl-sys (written by nccl-sys/generate.sh). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "err.h"
#include "profiler.h"
WRAPPER

# --- 3. bindgen ----------------------------------------------------------------
have="$("$bindgen" --version | awk '{print $2}')"
if [[ "$have" != "$BINDGEN_VERSION" ]]; then
    echo "generate.sh: warning: $bindgen is $have, the committed file was made with $BINDGEN_VERSION;" \
         "expect formatting differences" >&2
fi

types='ncclResult_t|ncclDebugLogger_t|ncclDebugLogLevel|ncclDebugLogSubSys'
types+='|ncclProfilerEventState(_v[1-6])?_t'
types+='|ncclProfilerEventDescr_v[1-6]_t|ncclProfilerEventStateArgs_v[1-6]_t|ncclProfiler_v[1-6]_t'
event_types='ncclProfile(Group|Coll|P2p|ProxyOp|ProxyStep|ProxyCtrl|KernelCh|NetPlugin'
event_types+='|GroupApi|CollApi|P2pApi|KernelLaunch|CeColl|CeSync|CeBatch)'

raw="$gen/bindings.raw.rs"
out="$gen/bindings.rs"
rm -f "$raw" "$out"
# Enums become a `u32`/`i32` alias plus one `pub const` per value (never a
# Rust enum: NCCL may pass a state this file does not know). The layout
# assertions bindgen writes (size, align, every field offset) are kept.
"$bindgen" "$inc/nccl_sys_wrapper.h" \
    --output "$raw" \
    --rust-target 1.85 \
    --formatter prettyplease \
    --default-enum-style consts \
    --no-prepend-enum-name \
    --with-derive-default \
    --no-doc-comments \
    --allowlist-type "$types" \
    --allowlist-var "$event_types" \
    --raw-line "// @generated by nccl-sys/generate.sh; do not edit. Regenerate with that script." \
    --raw-line "// Source: $NCCL_HOME commit $NCCL_COMMIT (NCCL $NCCL_VERSION)," \
    --raw-line "// $HEADER_DIR/{err.h,common.h,profiler.h,profiler_v1.h..profiler_v6.h}" \
    --raw-line "// (SPDX-License-Identifier: Apache-2.0, Copyright NVIDIA CORPORATION & AFFILIATES)." \
    --raw-line "// The ncclProfile* event-type enum is anonymous in profiler.h; generate.sh names" \
    --raw-line "// its type ncclProfilerEventType_t (bindgen would call it _bindgen_ty_1)." \
    -- -I"$inc" -std=c11

# --- 4. name the anonymous event-type enum ------------------------------------
# profiler.h's `enum { ncclProfileGroup = 1 << 0, ... }` has no name. It must
# be the only anonymous top-level enum in the output, as `_bindgen_ty_1`;
# anything else means the headers changed shape: stop rather than guess.
anon="$(grep -c '^pub type _bindgen_ty_[0-9]* = ' "$raw" || true)"
if [[ "$anon" != 1 ]] || ! grep -q '^pub const ncclProfileGroup: _bindgen_ty_1 = 1;$' "$raw"; then
    echo "generate.sh: expected exactly one anonymous enum, _bindgen_ty_1 holding ncclProfileGroup;" \
         "found $anon (see $raw)" >&2
    exit 1
fi
sed -e '/^\/\//!s/\b_bindgen_ty_1\b/ncclProfilerEventType_t/g' "$raw" >"$out"

# --- 5. install ----------------------------------------------------------------
dest="$here/src/bindings.rs"
if [[ -f "$dest" ]] && cmp -s "$out" "$dest"; then
    echo "generate.sh: $dest unchanged" >&2
else
    cp "$out" "$dest"
    echo "generate.sh: wrote $dest; now run: cargo test -p nccl-sys" >&2
fi

# --- 6. the C compiler's offsets, for tests/layout.rs -------------------------
# tests/offsets.txt is what tests/offsets.c prints; layout.rs checks that its
# pinned constants are exactly these lines, and that the Rust structs agree.
cc="${CC:-cc}"
if command -v "$cc" >/dev/null; then
    "$cc" -std=c11 -Wall -Werror -I"$inc" "$here/tests/offsets.c" -o "$gen/offsets"
    "$gen/offsets" >"$gen/offsets.txt"
    if [[ -f "$here/tests/offsets.txt" ]] && cmp -s "$gen/offsets.txt" "$here/tests/offsets.txt"; then
        echo "generate.sh: $here/tests/offsets.txt unchanged" >&2
    else
        cp "$gen/offsets.txt" "$here/tests/offsets.txt"
        echo "generate.sh: wrote $here/tests/offsets.txt (update the constants in tests/layout.rs to match)" >&2
    fi
else
    echo "generate.sh: warning: no C compiler ($cc); tests/offsets.txt not refreshed" >&2
fi
echo "generate.sh: headers for tests/offsets.c are in $inc" >&2
