#!/bin/sh
# End-to-end self-test of the doubles with selftest_agent.so (a minimal C
# agent): builds into a temp dir, runs testprog under several scenarios and
# checks what the agent counted against $FAKE_CUPTI_REPORT.
#   tests/doubles/selftest.sh [OUTDIR]      exit 0 = all passed
set -u
SRC=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$(mktemp -d /tmp/gputrace-doubles.XXXXXX)}
"$SRC/build.sh" "$OUT" || exit 1
W="$OUT/work"
rm -rf "$W"; mkdir -p "$W"
FAILS=0

val() { awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$2"; }

# Compare the agent's per-kind counts with the report's delivered counts.
compare() { # name agent_out report
    awk -v name="$1" '
        FNR == NR { a[$1] = $2; next }
        { r[$1] = $2 }
        END {
            bad = 0
            for (k in r) if (k ~ /^delivered\.[0-9]+$/) {
                kind = substr(k, 11) + 0
                if (kind < 64) { ak = "kind." kind; got = (ak in a) ? a[ak] : 0 }
                else { other += r[k]; continue }
                if (got != r[k]) { printf "  %s: kind %d agent %s report %s\n", name, kind, got, r[k]; bad = 1 }
            }
            if ((a["other_kinds"] + 0) != other + 0) { printf "  %s: other kinds agent %s report %s\n", name, a["other_kinds"], other; bad = 1 }
            if ((a["dropped"] + 0) != (r["dropped.reported"] + 0)) { printf "  %s: dropped agent %s report %s\n", name, a["dropped"], r["dropped.reported"]; bad = 1 }
            if ((r["pending.total"] + 0) != 0) { printf "  %s: %s records never delivered\n", name, r["pending.total"]; bad = 1 }
            if ((a["bad_ts"] + 0) != 0) { printf "  %s: %s records with start > end\n", name, a["bad_ts"]; bad = 1 }
            if ((a["null_names"] + 0) != (r["null_names"] + 0)) { printf "  %s: null names agent %s report %s\n", name, a["null_names"], r["null_names"]; bad = 1 }
            exit bad
        }' "$2" "$3"
}

# run NAME CUPTI_MAJOR EXPECT_RC SCENARIO_TEXT [testprog args...]
run() {
    name=$1 major=$2 want=$3 text=$4; shift 4
    printf '%s\n' "$text" > "$W/$name.scn"
    rm -f "$W/$name.agent" "$W/$name.report"
    t0=$(date +%s%N)
    env FAKE_CUPTI_SCENARIO="$W/$name.scn" FAKE_CUPTI_REPORT="$W/$name.report" \
        SELFTEST_OUT="$W/$name.agent" CUDA_INJECTION64_PATH="${INJ-$OUT/selftest_agent.so}" \
        LD_LIBRARY_PATH="$OUT/cupti$major" timeout -s KILL 60 "$OUT/testprog" --ms "${MS:-5000}" "$@" \
        2> "$W/$name.stderr"
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ "$rc" != "$want" ]; then
        echo "FAIL $name: exit $rc, want $want"; sed 's/^/  /' "$W/$name.stderr"; FAILS=$((FAILS + 1)); return 1
    fi
    if [ -n "${NOCOMPARE-}" ]; then echo "ok   $name (exit $rc, ${ms} ms)"; return 0; fi
    if ! compare "$name" "$W/$name.agent" "$W/$name.report"; then FAILS=$((FAILS + 1)); return 1; fi
    printf 'ok   %-16s CUPTI %-4s exit %-3s %5s ms  delivered %s records in %s buffers, dropped %s, agent kinds: %s\n' \
        "$name" "$(val version "$W/$name.report")" "$rc" "$ms" "$(val delivered.total "$W/$name.report")" \
        "$(val buffers.completed "$W/$name.report")" "$(val dropped.reported "$W/$name.report")" \
        "$(grep '^kind\.' "$W/$name.agent" | tr '\n' ' ')"
}
check() { # name key expected file
    got=$(val "$2" "$4")
    if [ "$got" != "$3" ]; then echo "FAIL $1: $2 = $got, want $3"; FAILS=$((FAILS + 1)); fi
}

MIX='device
kernels 100 10000 5000 my_kernel<float>(int, float*)
api 100
memcpy 20 1048576 1
memset 5 4096
null_name 2
api 2
sync 3
p2p 4 65536
overhead 2
unknown_kind 3
dropped 7'

run v13.5 13 0 "version 13.5
$MIX"
check v13.5 kernel_without_api 0 "$W/v13.5.agent"
check v13.5 kind.10.size 248 "$W/v13.5.report"
check v13.5 kind.1.size 112 "$W/v13.5.report"
run v13.0 13 0 "version 13.0
$MIX"
check v13.0 kind.10.size 216 "$W/v13.0.report"
run v12.9 12 3 "version 12.9
$MIX" exit 3
check v12.9 kind.10.size 208 "$W/v12.9.report"
check v12.9 kind.1.size 96 "$W/v12.9.report"
run v12.0 12 0 "version 12.0
kernels 50
api 50
memcpy 10 4096 2
memset 3 128
sync 2
p2p 1 4096
invalid_record
dropped 1"
check v12.0 kind.1.size 88 "$W/v12.0.report"
check v12.0 invalid_stops 1 "$W/v12.0.agent"
SELFTEST_BUFSZ=65536 FAKE_CUPTI_RECORDS=0 run burst 13 0 "burst 300000"
check burst delivered.total 300000 "$W/burst.report"
SELFTEST_FLUSH_MS=20 run race_flush 13 0 "race_flush 200
race_flush 200"
check race_flush race_flush.done 2 "$W/race_flush.report"
SELFTEST_BUFSZ=16 run nobuffer 13 0 "kernels 10
memcpy 5 64"
check nobuffer dropped.nobuffer 15 "$W/nobuffer.report"
run fail_enable 13 0 "fail cuptiActivityEnable 21 1
kernels 10
memcpy 10 100"
check fail_enable enable_errors 1 "$W/fail_enable.agent"
check fail_enable skipped_disabled.10 10 "$W/fail_enable.report"
SELFTEST_FINALIZE=1 SELFTEST_FLUSH_MS=10 run finalize 13 0 "kernels 500 20000 0
api 500"
check finalize finalized 1 "$W/finalize.report"
check finalize kernel_without_api 0 "$W/finalize.agent"
MS=300 run subscribe39 13 0 "subscribe_error 39
kernels 10"
check subscribe39 subscribe_result 39 "$W/subscribe39.agent"
check subscribe39 emitted.total 0 "$W/subscribe39.report"
# Multi-subscriber (v2) API. Another tool that allows multiple subscribers:
# v2 + allowMultipleSubscribers=1 gets everything through the v2 callbacks.
# Small buffers + a flusher thread: the worker completes full buffers through
# complete_v2 on its thread while FlushAll delivers on the flusher's.
SELFTEST_BUFSZ=4096 SELFTEST_FLUSH_MS=5 SELFTEST_SUBSCRIBE=v2 run v2_multi 13 0 "other_subscriber multi
$MIX"
for kv in subscribe_v2_result=0 v2_in_use=1 v2_setup_result=0 v2_bad_info=0 \
          timestamp_v2_result=0 old_name_nsys=1 enable_errors=0 kernel_without_api=0; do
    check v2_multi "${kv%%=*}" "${kv#*=}" "$W/v2_multi.agent"
done
for kv in subscriber.mode=v2 subscriber.multi=1 mixed_calls=0 thread_id_type=1 callbacks=v2 \
          activity_scope=subscriber calls.cuptiActivityGetNextRecord=0 calls.cuptiActivityEnable=0; do
    check v2_multi "${kv%%=*}" "${kv#*=}" "$W/v2_multi.report"
done
check v2_multi v2_buffers "$(val buffers.completed "$W/v2_multi.report")" "$W/v2_multi.agent"
# ... while a v1 cuptiSubscribe is refused (39).
MS=300 run multi_v1 13 0 "other_subscriber multi
kernels 10"
check multi_v1 subscribe_result 39 "$W/multi_v1.agent"
check multi_v1 emitted.total 0 "$W/multi_v1.report"
check multi_v1 subscriber.mode none "$W/multi_v1.report"
# A legacy tool (nsys) holds the only slot: v2 gets 39 and its name.
MS=300 SELFTEST_SUBSCRIBE=v2 run legacy_v2 13 0 "other_subscriber legacy
kernels 10"
check legacy_v2 subscribe_v2_result 39 "$W/legacy_v2.agent"
check legacy_v2 old_name_nsys 1 "$W/legacy_v2.agent"
check legacy_v2 emitted.total 0 "$W/legacy_v2.report"
# Old driver: v2 with allowMultipleSubscribers=1 -> 27, then v1 works.
SELFTEST_SUBSCRIBE=v2 run old_driver 13 0 "multi_subscriber_unsupported
kernels 50
api 50
memcpy 5 4096
dropped 2"
check old_driver subscribe_v2_result 27 "$W/old_driver.agent"
check old_driver subscribe_result 0 "$W/old_driver.agent"
check old_driver v2_in_use 0 "$W/old_driver.agent"
for kv in subscriber.mode=v1 subscriber.multi=0 mixed_calls=0 callbacks=v1 activity_scope=global; do
    check old_driver "${kv%%=*}" "${kv#*=}" "$W/old_driver.report"
done
# Mixing the two families: NOT_COMPATIBLE (14), counted, tracing unharmed.
SELFTEST_SUBSCRIBE=v2 SELFTEST_MIX=1 run mix_v2 13 0 "other_subscriber multi
kernels 20
api 20"
check mix_v2 mix_result 14 "$W/mix_v2.agent"
check mix_v2 mixed_calls 1 "$W/mix_v2.report"
SELFTEST_MIX=1 run mix_v1 13 0 "kernels 20"
check mix_v1 mix_result 14 "$W/mix_v1.agent"
check mix_v1 mixed_calls 1 "$W/mix_v1.report"
# 13.1: allowMultipleSubscribers is not in its struct, the v2 activity calls
# are not in the library (the fake answers 27).
MS=300 SELFTEST_SUBSCRIBE=v2 run v2_on_13.1 13 0 "version 13.1
other_subscriber multi
kernels 10"
check v2_on_13.1 subscribe_v2_result 39 "$W/v2_on_13.1.agent"
MS=300 SELFTEST_SUBSCRIBE=v2 run v2_on_13.1b 13 0 "version 13.1
kernels 10"
check v2_on_13.1b subscribe_v2_result 0 "$W/v2_on_13.1b.agent"
check v2_on_13.1b v2_setup_result 27 "$W/v2_on_13.1b.agent"
check v2_on_13.1b subscriber.multi 0 "$W/v2_on_13.1b.report"

# Return codes of the v2 entry points per version, called directly.
cat > "$W/v2probe.c" <<'PROBE'
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
typedef struct { size_t sz; const char *n; char *old; size_t oldsz; uint8_t multi, pad[7]; } P;
static void req(uint8_t **b, size_t *s, size_t *m, void *i) { (void)i; *b = 0; *s = 0; *m = 0; }
static void cpl(uint8_t *b, size_t s, size_t v, void *i) { (void)b; (void)s; (void)v; (void)i; }
int main(int c, char **v) {
    (void)c;
    void *cu = dlopen(v[1], RTLD_NOW | RTLD_GLOBAL);
    void *h = cu ? dlopen(v[2], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) return 2;
    ((int (*)(unsigned))dlsym(cu, "cuInit"))(0);
#define F(name, ...) ((int (*)(__VA_ARGS__))dlsym(h, name))
    uint64_t ts = 0;
    size_t n = 0;
    void *sub = 0, *rec = 0;
    uint8_t buf[64];
    struct { size_t sz; uint8_t rest[32]; } cfg = {0, {0}};
    P small = {16, 0, 0, 0, 0, {0}}, p = {40, "probe", 0, 0, 1, {0}};
    int r[12];
    r[0] = F("cuptiGetTimestamp_v2", void *, uint64_t *)(0, &ts);
    r[1] = F("cuptiSubscribe_v2", void **, void *, void *, P *)(&sub, 0, 0, &small);
    r[2] = F("cuptiSubscribe_v2", void **, void *, void *, P *)(&sub, 0, 0, &p);
    r[3] = F("cuptiActivityRegisterCallbacks_v2", void *, void *, void *)(buf, (void *)req, (void *)cpl);
    r[4] = F("cuptiActivityGetNextRecord_v2", void *, uint8_t *, size_t, void **)(sub, buf, 0, &rec);
    r[5] = F("cuptiActivityGetNumDroppedRecords_v2", void *, void *, uint32_t, size_t *)(sub, 0, 0, &n);
    r[6] = F("cuptiGetTimestamp_v2", void *, uint64_t *)(sub, &ts);
    r[7] = F("cuptiActivityEnable_v2", void *, uint32_t, void *)(sub, 10, &cfg);
    r[8] = F("cuptiActivityEnable", uint32_t)(10);
    r[9] = F("cuptiSetThreadIdType", uint32_t)(1);
    r[10] = F("cuptiActivityFlushAll", uint32_t)(0);
    r[11] = F("cuptiSubscribe", void **, void *, void *)(&sub, 0, 0);
    for (int i = 0; i < 12; i++) printf("%d%s", r[i], i < 11 ? " " : "\n");
    return 0;
}
PROBE
gcc -O1 -Wall -Werror -o "$W/v2probe" "$W/v2probe.c" -ldl
# GetTimestamp_v2(NULL) Subscribe_v2(size 16) Subscribe_v2(multi) RegisterCallbacks_v2(bad
# handle) GetNextRecord_v2 GetNumDropped_v2 GetTimestamp_v2 Enable_v2(cfg size 0)
# Enable(v1) SetThreadIdType(v1) FlushAll Subscribe(v1, second)
for case in "13.5 1 1 0 1 12 0 0 1 14 14 7 39" "13.3 1 1 0 1 12 0 0 1 14 14 7 39" \
            "13.2 27 1 0 1 27 27 27 1 14 14 7 39" "13.1 27 1 0 27 27 27 27 27 0 0 7 39"; do
    set -- $case
    ver=$1; shift
    echo "version $ver" > "$W/v2p.scn"
    got=$(FAKE_CUPTI_SCENARIO="$W/v2p.scn" CUDA_INJECTION64_PATH= "$W/v2probe" "$OUT/libcuda.so.1" "$OUT/cupti13/libcupti.so.13")
    if [ "$got" = "$*" ]; then echo "ok   v2probe-$ver: $got"
    else echo "FAIL v2probe-$ver: got '$got' want '$*'"; FAILS=$((FAILS + 1)); fi
done

# External correlation ids: per-thread stacks per kind, called directly.
cat > "$W/extprobe.c" <<'PROBE'
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
typedef int (*push_t)(uint32_t, uint64_t);
typedef int (*pop_t)(uint32_t, uint64_t *);
static pop_t pop;
static int other;
static void *on_other_thread(void *a) { uint64_t x = 0; (void)a; other = pop(5, &x); return 0; }
int main(int c, char **v) {
    (void)c;
    void *cu = dlopen(v[1], RTLD_NOW | RTLD_GLOBAL);
    void *h = cu ? dlopen(v[2], RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) return 2;
    ((int (*)(unsigned))dlsym(cu, "cuInit"))(0);
    push_t push = (push_t)dlsym(h, "cuptiActivityPushExternalCorrelationId");
    pop = (pop_t)dlsym(h, "cuptiActivityPopExternalCorrelationId");
    int (*push2)(void *, uint32_t, uint64_t) =
        (int (*)(void *, uint32_t, uint64_t))dlsym(h, "cuptiActivityPushExternalCorrelationId_v2");
    uint64_t a = 0, b = 0;
    pthread_t t;
    int r0 = pop(5, &a), r1 = push(5, 42), r2 = push(5, 43), r3 = push(0, 1), r4 = push(6, 1);
    pthread_create(&t, 0, on_other_thread, 0);
    pthread_join(t, 0);
    int r5 = pop(5, &a), r6 = pop(5, &b), r7 = pop(5, 0), r8 = pop(3, 0);
    printf("%d %d %d %d %d %d %d %llu %d %llu %d %d ", r0, r1, r2, r3, r4, other, r5,
           (unsigned long long)a, r6, (unsigned long long)b, r7, r8);
    if (push2) printf("%d\n", push2(0, 5, 1)); else printf("-\n");
    return 0;
}
PROBE
gcc -O1 -Wall -Werror -pthread -o "$W/extprobe" "$W/extprobe.c" -ldl
# Pop(empty) Push Push Push(kind 0) Push(kind 6) Pop(other thread) Pop=43 Pop=42
# Pop(empty) Pop(kind 3, empty) Push_v2(NULL handle)
for case in "12.9 12 18 0 0 1 1 18 0 43 0 42 18 18 -" "13.5 13 18 0 0 1 1 18 0 43 0 42 18 18 1" \
            "13.2 13 18 0 0 1 1 18 0 43 0 42 18 18 27"; do
    set -- $case
    ver=$1 maj=$2; shift 2
    echo "version $ver" > "$W/extp.scn"
    got=$(FAKE_CUPTI_SCENARIO="$W/extp.scn" FAKE_CUPTI_REPORT="$W/extp.report" CUDA_INJECTION64_PATH= \
          "$W/extprobe" "$OUT/libcuda.so.1" "$OUT/cupti$maj/libcupti.so.$maj")
    if [ "$got" = "$*" ]; then echo "ok   extprobe-$ver: $got"
    else echo "FAIL extprobe-$ver: got '$got' want '$*'"; FAILS=$((FAILS + 1)); fi
    check "extprobe-$ver" ext_corr.pushed 2 "$W/extp.report"
    check "extprobe-$ver" ext_corr.popped 2 "$W/extp.report"
    check "extprobe-$ver" ext_corr.pop_empty 4 "$W/extp.report"
done
# testprog nccl needs a plugin.
env -u NCCL_PROFILER_PLUGIN CUDA_INJECTION64_PATH= "$OUT/testprog" --ms 0 nccl 1 2> "$W/noplugin.stderr"
rc=$?
if [ $rc = 3 ] && grep -q NCCL_PROFILER_PLUGIN "$W/noplugin.stderr"; then echo "ok   nccl-no-plugin: exit 3"
else echo "FAIL nccl-no-plugin: exit $rc, want 3"; FAILS=$((FAILS + 1)); fi

MS=300 run fork 13 0 "kernels 30
api 30" fork-no-exec
NOCOMPARE=1 run sigterm 13 143 "kernels 5" sigterm-self
MS=300 SELFTEST_BAD_FORK=1 NOCOMPARE=1 run bad_fork 13 97 "kernels 5" fork-no-exec
grep -q 'called in a fork()ed child' "$W/bad_fork.stderr" || { echo "FAIL bad_fork: no message"; FAILS=$((FAILS + 1)); }
MS=300 NOCOMPARE=1 INJ=none run crash_unused 13 0 "crash_if_called ANY
kernels 5"
NOCOMPARE=1 run crash_used 13 134 "crash_if_called cuptiActivityEnable"

# No libcuda.so.1 in the process: the section-6 behaviour of each version.
cat > "$W/nodriver.c" <<'PROBE'
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
int main(int c, char **v) {
    void *h = dlopen(v[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) return 2;
    int (*ver)(uint32_t *) = (int (*)(uint32_t *))dlsym(h, "cuptiGetVersion");
    int (*en)(uint32_t) = (int (*)(uint32_t))dlsym(h, "cuptiActivityEnable");
    uint32_t x = 7;
    int r1 = ver(&x), r2 = en(10);
    printf("%d %u %d\n", r1, x, r2);
    return c > 9;
}
PROBE
gcc -O1 -Wall -Werror -o "$W/nodriver" "$W/nodriver.c" -ldl
for case in "12.4 12 0 22 15" "12.9 12 0 28 15" "13.1 13 0 130101 999" "13.5 13 999 0 999"; do
    set -- $case
    echo "version $1" > "$W/nd.scn"
    got=$(FAKE_CUPTI_SCENARIO="$W/nd.scn" "$W/nodriver" "$OUT/cupti$2/libcupti.so.$2")
    if [ "$got" = "$3 $4 $5" ]; then echo "ok   nodriver-$1: GetVersion=$3 (v=$4) Enable=$5"
    else echo "FAIL nodriver-$1: got '$got' want '$3 $4 $5'"; FAILS=$((FAILS + 1)); fi
done
echo "version 13.2" > "$W/nd.scn"
FAKE_CUPTI_SCENARIO="$W/nd.scn" "$W/nodriver" "$OUT/cupti13/libcupti.so.13" >/dev/null 2>&1
rc=$?
if [ $rc = 139 ]; then echo "ok   nodriver-13.2: SIGSEGV on first call"
else echo "FAIL nodriver-13.2: exit $rc, want 139"; FAILS=$((FAILS + 1)); fi

if [ $FAILS = 0 ]; then echo "selftest: all passed ($OUT)"; exit 0; fi
echo "selftest: $FAILS failure(s) ($OUT)"; exit 1
