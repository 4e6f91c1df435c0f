/*
 * Ground truth for tests/layout.rs: prints the sizes and field offsets of
 * NCCL's profiler-plugin structs as the C compiler lays them out. The
 * expected constants in layout.rs are this program's output on x86_64 Linux.
 *
 * Run (after nccl-sys/generate.sh, which leaves the pinned headers in
 * $NCCL_GEN_DIR/headers, default /tmp/nccl-sys-gen/headers):
 *
 *   clang -std=c11 -Wall -I/tmp/nccl-sys-gen/headers nccl-sys/tests/offsets.c -o /tmp/nccl-offsets
 *   /tmp/nccl-offsets
 *
 * nccl-sys/generate.sh does this itself and stores the output as
 * tests/offsets.txt, which layout.rs compares its constants with.
 *
 * Each line is `<type> <field> <offset>` or `<type> sizeof <size>`, with the
 * same names layout.rs uses (anonymous-union members written as in C,
 * `coll.func`; in Rust they sit under `__bindgen_anon_1`).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "err.h"
#include "profiler.h"

#define SIZE(T) printf("%s sizeof %zu\n", #T, sizeof(T))
#define OFF(T, F) printf("%s %s %zu\n", #T, #F, offsetof(T, F))

/* Fields every descriptor has, and the function table (same order in v1..v6). */
#define COMMON(V)                                                  \
    SIZE(ncclProfilerEventDescr_##V##_t);                          \
    OFF(ncclProfilerEventDescr_##V##_t, type);                     \
    OFF(ncclProfilerEventDescr_##V##_t, parentObj);                \
    OFF(ncclProfilerEventDescr_##V##_t, rank);                     \
    SIZE(ncclProfilerEventStateArgs_##V##_t);                      \
    SIZE(ncclProfiler_##V##_t);                                    \
    OFF(ncclProfiler_##V##_t, name);                               \
    OFF(ncclProfiler_##V##_t, init);                               \
    OFF(ncclProfiler_##V##_t, startEvent);                         \
    OFF(ncclProfiler_##V##_t, stopEvent);                          \
    OFF(ncclProfiler_##V##_t, recordEventState);                   \
    OFF(ncclProfiler_##V##_t, finalize)

/* coll and p2p: in v1..v3 they also start with name and commHash. */
#define COLL_P2P(V)                                                \
    OFF(ncclProfilerEventDescr_##V##_t, coll.seqNumber);           \
    OFF(ncclProfilerEventDescr_##V##_t, coll.func);                \
    OFF(ncclProfilerEventDescr_##V##_t, coll.count);               \
    OFF(ncclProfilerEventDescr_##V##_t, coll.root);                \
    OFF(ncclProfilerEventDescr_##V##_t, coll.datatype);            \
    OFF(ncclProfilerEventDescr_##V##_t, coll.nWarps);              \
    OFF(ncclProfilerEventDescr_##V##_t, coll.algo);                \
    OFF(ncclProfilerEventDescr_##V##_t, coll.proto);               \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.func);                 \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.buff);                 \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.datatype);             \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.count);                \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.peer)

#define V1_V3(V)                                                   \
    OFF(ncclProfilerEventDescr_##V##_t, coll.name);                \
    OFF(ncclProfilerEventDescr_##V##_t, coll.commHash);            \
    OFF(ncclProfilerEventDescr_##V##_t, coll.nMaxChannels);        \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.name);                 \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.commHash)

#define V4_V6(V)                                                   \
    OFF(ncclProfilerEventDescr_##V##_t, coll.nChannels);           \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.nChannels);            \
    OFF(ncclProfilerEventDescr_##V##_t, kernelCh.channelId);       \
    OFF(ncclProfilerEventDescr_##V##_t, kernelCh.pTimer)

#define V5_V6(V)                                                   \
    OFF(ncclProfilerEventDescr_##V##_t, coll.parentGroup);         \
    OFF(ncclProfilerEventDescr_##V##_t, p2p.parentGroup);          \
    OFF(ncclProfilerEventDescr_##V##_t, groupApi.graphCaptured);   \
    OFF(ncclProfilerEventDescr_##V##_t, groupApi.groupDepth);      \
    OFF(ncclProfilerEventDescr_##V##_t, collApi.func);             \
    OFF(ncclProfilerEventDescr_##V##_t, collApi.count);            \
    OFF(ncclProfilerEventDescr_##V##_t, collApi.datatype);         \
    OFF(ncclProfilerEventDescr_##V##_t, collApi.root);             \
    OFF(ncclProfilerEventDescr_##V##_t, collApi.stream);           \
    OFF(ncclProfilerEventDescr_##V##_t, collApi.graphCaptured);    \
    OFF(ncclProfilerEventDescr_##V##_t, p2pApi.func);              \
    OFF(ncclProfilerEventDescr_##V##_t, p2pApi.count);             \
    OFF(ncclProfilerEventDescr_##V##_t, p2pApi.datatype);          \
    OFF(ncclProfilerEventDescr_##V##_t, p2pApi.stream);            \
    OFF(ncclProfilerEventDescr_##V##_t, p2pApi.graphCaptured);     \
    OFF(ncclProfilerEventDescr_##V##_t, kernelLaunch.stream)

int main(void) {
    COMMON(v1); COLL_P2P(v1); V1_V3(v1);
    OFF(ncclProfilerEventDescr_v1_t, coll.op);
    COMMON(v2); COLL_P2P(v2); V1_V3(v2);
    COMMON(v3); COLL_P2P(v3); V1_V3(v3);
    COMMON(v4); COLL_P2P(v4); V4_V6(v4);
    COMMON(v5); COLL_P2P(v5); V4_V6(v5); V5_V6(v5);
    COMMON(v6); COLL_P2P(v6); V4_V6(v6); V5_V6(v6);
    OFF(ncclProfilerEventDescr_v6_t, ceColl.seqNumber);
    OFF(ncclProfilerEventDescr_v6_t, ceColl.func);
    OFF(ncclProfilerEventDescr_v6_t, ceColl.count);
    OFF(ncclProfilerEventDescr_v6_t, ceColl.root);
    OFF(ncclProfilerEventDescr_v6_t, ceColl.datatype);
    OFF(ncclProfilerEventDescr_v6_t, ceColl.syncStrategy);
    OFF(ncclProfilerEventDescr_v6_t, ceColl.ceSeqNum);
    OFF(ncclProfilerEventDescr_v6_t, ceColl.stream);
    return 0;
}
