/* selftest_agent.c -- a minimal CUPTI activity agent used only to prove the
 * doubles work end to end (selftest.sh). Not a model for the real agent.
 *
 * InitializeInjection: checks libcuda.so.1 is loaded, dlopens
 * $SELFTEST_CUPTI (default "libcupti.so") and resolves everything with dlsym,
 * subscribes, registers buffer callbacks, enables $SELFTEST_KINDS (default
 * 10,1,2,5,38,22,17,8), optionally starts a thread calling FlushAll(0) every
 * $SELFTEST_FLUSH_MS, and registers an atexit handler that does a forced
 * flush, reads the dropped count, calls cuptiFinalize if
 * $SELFTEST_FINALIZE=1, and writes counts to $SELFTEST_OUT.
 * Buffers are $SELFTEST_BUFSZ bytes (default 1 MiB), 8-aligned.
 *
 * $SELFTEST_SUBSCRIBE=v2: first cuptiSubscribe_v2 with structSize 40 and
 * allowMultipleSubscribers=1. On success everything goes through the
 * subscriber-scoped API (SetAttribute_v2 THREAD_ID_TYPE, RegisterCallbacks_v2,
 * Enable_v2, GetNextRecord_v2, GetNumDroppedRecords_v2, GetTimestamp_v2; only
 * FlushAll is shared). On 39 it gives up; on any other error it falls back to
 * the v1 path (what gputrace's agent does). $SELFTEST_MIX=1 makes one
 * deliberate call of the other API family after setup (mix_result).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_LIMIT_REACHED 12
#define INVALID_KIND 21

typedef int (*fn_u32)(uint32_t);
typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*cpl_fn)(void *, uint32_t, uint8_t *, size_t, size_t);
typedef struct { size_t structSize; } req_info;
typedef struct { size_t structSize; uint64_t threadId; void **layouts; size_t nlayouts; } cpl_info;
typedef void (*req2_fn)(uint8_t **, size_t *, size_t *, req_info *);
typedef void (*cpl2_fn)(uint8_t *, size_t, size_t, cpl_info *);
typedef struct { /* CUpti_SubscriberParams, 13.2+ (40 bytes) */
    size_t structSize;
    const char *subscriberName;
    char *oldSubscriberName;
    size_t oldSubscriberSize;
    uint8_t allowMultipleSubscribers, padding[7];
} sub_params;

static struct {
    int (*subscribe)(void **, void *, void *);
    int (*reg)(req_fn, cpl_fn);
    fn_u32 enable, flush, set_tid_type;
    int (*finalize)(void);
    int (*next)(uint8_t *, size_t, void **);
    int (*dropped)(void *, uint32_t, size_t *);
    /* subscriber-scoped (v2) API */
    int (*subscribe2)(void **, void *, void *, sub_params *);
    int (*reg2)(void *, req2_fn, cpl2_fn);
    int (*enable2)(void *, uint32_t, void *);
    int (*set_attr2)(void *, uint32_t, size_t *, void *);
    int (*next2)(void *, uint8_t *, size_t, void **);
    int (*dropped2)(void *, void *, uint32_t, size_t *);
    int (*timestamp2)(void *, uint64_t *);
} api;
static void *sub;       /* subscriber handle */
static int use_v2;      /* subscriber-scoped API in use */
static int subscribe_v2_result = -1, v2_setup_result = -1, mix_result = -1,
           timestamp_v2_result = -1, old_name_nsys;
static uint64_t v2_buffers, v2_bad_info;

#define CORR_MAX (1u << 22)
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t kinds[64], other_kinds, null_names, invalid_stops, bad_ts, buffers,
    empty_buffers, dropped_total, bytes;
static int in_cb, max_in_cb, subscribe_result = -1, enable_errors, child;
static uint8_t *kernel_corr, *api_corr;
static size_t bufsz = 1 << 20;
static const char *outpath;

static void buffer_requested(uint8_t **buf, size_t *size, size_t *max) {
    void *p = NULL;
    if (posix_memalign(&p, 8, bufsz)) p = NULL;
    *buf = p;
    *size = p ? bufsz : 0;
    *max = 0;
}

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int next_rec(uint8_t *buf, size_t valid, void **rec) {
    return use_v2 ? api.next2(sub, buf, valid, rec) : api.next(buf, valid, rec);
}
static int get_dropped(size_t *d) {
    return use_v2 ? api.dropped2(sub, NULL, 0, d) : api.dropped(NULL, 0, d);
}

static void buffer_completed(void *ctx, uint32_t stream, uint8_t *buf, size_t size,
                             size_t valid) {
    (void)ctx; (void)stream; (void)size;
    pthread_mutex_lock(&mu);
    if (++in_cb > max_in_cb) max_in_cb = in_cb;
    pthread_mutex_unlock(&mu);
    usleep(2000); /* widen the window in which two deliveries can overlap */
    uint64_t local[64] = {0}, other = 0, nulls = 0, bad = 0, stops = 0;
    void *rec = NULL;
    for (;;) {
        int r = next_rec(buf, valid, &rec);
        if (r == MAX_LIMIT_REACHED) break;
        if (r == INVALID_KIND) { stops++; break; }
        if (r != 0) { stops++; break; }
        const uint8_t *p = rec;
        uint32_t k = rd32(p);
        if (k < 64) local[k]++; else other++;
        if (k == 10 || k == 3) {
            const char *name;
            memcpy(&name, p + 104, sizeof name);
            if (!name) nulls++;
            if (rd64(p + 16) > rd64(p + 24)) bad++;
            uint32_t c = rd32(p + 92);
            if (c < CORR_MAX) kernel_corr[c] = 1;
        } else if (k == 5 || k == 4) {
            if (rd64(p + 8) > rd64(p + 16)) bad++;
            uint32_t c = rd32(p + 32);
            if (c < CORR_MAX) api_corr[c] = 1;
        } else if (k == 1 || k == 2 || k == 22) {
            if (rd64(p + 16) > rd64(p + 24)) bad++;
        }
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 64; i++) kinds[i] += local[i];
    other_kinds += other;
    null_names += nulls;
    bad_ts += bad;
    invalid_stops += stops;
    buffers++;
    if (!valid) empty_buffers++;
    bytes += valid;
    in_cb--;
    pthread_mutex_unlock(&mu);
    free(buf);
}

static void buffer_requested2(uint8_t **buf, size_t *size, size_t *max, req_info *info) {
    if (!info || info->structSize < sizeof *info) {
        pthread_mutex_lock(&mu);
        v2_bad_info++;
        pthread_mutex_unlock(&mu);
    }
    buffer_requested(buf, size, max);
}
static void buffer_completed2(uint8_t *buf, size_t size, size_t valid, cpl_info *info) {
    pthread_mutex_lock(&mu);
    v2_buffers++;
    if (!info || info->structSize < sizeof *info || info->layouts || info->nlayouts)
        v2_bad_info++;
    pthread_mutex_unlock(&mu);
    buffer_completed(NULL, 0, buf, size, valid);
}

static void at_exit(void) {
    if (child || subscribe_result != 0) goto write;
    api.flush(1);
    size_t d = 0;
    if (get_dropped(&d) == 0) {
        pthread_mutex_lock(&mu);
        dropped_total += d;
        pthread_mutex_unlock(&mu);
    }
    const char *fin = getenv("SELFTEST_FINALIZE");
    if (fin && *fin == '1' && api.finalize) api.finalize();
write:
    if (child || !outpath) return;
    FILE *f = fopen(outpath, "w");
    if (!f) return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 64; i++)
        if (kinds[i]) fprintf(f, "kind.%d %llu\n", i, (unsigned long long)kinds[i]);
    uint64_t api_no_kernel = 0, kernel_no_api = 0;
    for (uint32_t c = 0; c < CORR_MAX; c++) {
        api_no_kernel += api_corr[c] && !kernel_corr[c];
        kernel_no_api += kernel_corr[c] && !api_corr[c];
    }
    fprintf(f, "other_kinds %llu\nnull_names %llu\ninvalid_stops %llu\nbad_ts %llu\n"
               "buffers %llu\nempty_buffers %llu\nbytes %llu\ndropped %llu\n"
               "api_without_kernel %llu\nkernel_without_api %llu\nmax_concurrent_callbacks %d\n"
               "subscribe_result %d\nenable_errors %d\n"
               "subscribe_v2_result %d\nv2_in_use %d\nv2_setup_result %d\nv2_buffers %llu\n"
               "v2_bad_info %llu\nmix_result %d\ntimestamp_v2_result %d\nold_name_nsys %d\n",
            (unsigned long long)other_kinds, (unsigned long long)null_names,
            (unsigned long long)invalid_stops, (unsigned long long)bad_ts,
            (unsigned long long)buffers, (unsigned long long)empty_buffers,
            (unsigned long long)bytes, (unsigned long long)dropped_total,
            (unsigned long long)api_no_kernel, (unsigned long long)kernel_no_api, max_in_cb,
            subscribe_result, enable_errors, subscribe_v2_result, use_v2, v2_setup_result,
            (unsigned long long)v2_buffers, (unsigned long long)v2_bad_info, mix_result,
            timestamp_v2_result, old_name_nsys);
    pthread_mutex_unlock(&mu);
    fclose(f);
}

static void *flusher(void *arg) {
    unsigned ms = (unsigned)(uintptr_t)arg;
    for (;;) {
        usleep(ms * 1000);
        if (child) return NULL;
        api.flush(0);
        size_t d = 0;
        if (get_dropped(&d) == 0) {
            pthread_mutex_lock(&mu);
            dropped_total += d;
            pthread_mutex_unlock(&mu);
        }
    }
}

/* Never touch CUPTI in a child -- unless SELFTEST_BAD_FORK=1, which flushes
 * there on purpose to show fake_cupti catching it. */
static void on_fork_child(void) {
    child = 1;
    const char *b = getenv("SELFTEST_BAD_FORK");
    if (b && *b == '1' && api.flush) api.flush(0);
}

EXPORT int InitializeInjection(void) {
    outpath = getenv("SELFTEST_OUT");
    atexit(at_exit);
    pthread_atfork(NULL, NULL, on_fork_child);
    if (!dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY)) return 0;
    const char *lib = getenv("SELFTEST_CUPTI");
    void *h = dlopen(lib && *lib ? lib : "libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "selftest_agent: %s\n", dlerror()); return 0; }
#define SYM(f, n) *(void **)&api.f = dlsym(h, n)
    SYM(subscribe, "cuptiSubscribe");
    SYM(reg, "cuptiActivityRegisterCallbacks");
    SYM(enable, "cuptiActivityEnable");
    SYM(flush, "cuptiActivityFlushAll");
    SYM(set_tid_type, "cuptiSetThreadIdType");
    SYM(next, "cuptiActivityGetNextRecord");
    SYM(dropped, "cuptiActivityGetNumDroppedRecords");
    SYM(finalize, "cuptiFinalize");
    SYM(subscribe2, "cuptiSubscribe_v2");
    SYM(reg2, "cuptiActivityRegisterCallbacks_v2");
    SYM(enable2, "cuptiActivityEnable_v2");
    SYM(set_attr2, "cuptiActivitySetAttribute_v2");
    SYM(next2, "cuptiActivityGetNextRecord_v2");
    SYM(dropped2, "cuptiActivityGetNumDroppedRecords_v2");
    SYM(timestamp2, "cuptiGetTimestamp_v2");
    if (!api.subscribe || !api.reg || !api.enable || !api.flush || !api.next || !api.dropped)
        return 0;
    const char *bs = getenv("SELFTEST_BUFSZ");
    if (bs && atol(bs) > 0) bufsz = (size_t)atol(bs);
    kernel_corr = calloc(CORR_MAX, 1);
    api_corr = calloc(CORR_MAX, 1);
    const char *mode = getenv("SELFTEST_SUBSCRIBE");
    if (mode && strcmp(mode, "v2") == 0) {
        if (!api.subscribe2 || !api.reg2 || !api.enable2 || !api.set_attr2 || !api.next2 ||
            !api.dropped2 || !api.timestamp2)
            return 0;
        char old[64] = "";
        sub_params p = {sizeof p, "selftest", old, sizeof old, 1, {0}};
        subscribe_v2_result = api.subscribe2(&sub, NULL, NULL, &p);
        old_name_nsys = strcmp(old, "Nsight Systems") == 0;
        if (subscribe_v2_result == 39) { subscribe_result = 39; return 0; }
        use_v2 = subscribe_v2_result == 0;
    }
    if (!use_v2) {
        subscribe_result = api.subscribe(&sub, NULL, NULL);
        if (subscribe_result != 0) return 0; /* e.g. 39: another tool owns CUPTI */
        api.set_tid_type(1);
        if (api.reg(buffer_requested, buffer_completed) != 0) return 0;
    } else {
        subscribe_result = 0;
        uint32_t tid_type = 1; /* CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM */
        size_t sz = sizeof tid_type;
        v2_setup_result = api.set_attr2(sub, 21, &sz, &tid_type);
        if (v2_setup_result != 0) return 0;
        v2_setup_result = api.reg2(sub, buffer_requested2, buffer_completed2);
        if (v2_setup_result != 0) return 0;
        uint64_t ts = 0;
        timestamp_v2_result = api.timestamp2(sub, &ts);
        if (timestamp_v2_result == 0 && ts == 0) timestamp_v2_result = -2;
    }
    const char *ks = getenv("SELFTEST_KINDS");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ks && *ks ? ks : "10,1,2,5,38,22,17,8");
    for (char *s = NULL, *t = strtok_r(buf, ",", &s); t; t = strtok_r(NULL, ",", &s))
        if ((use_v2 ? api.enable2(sub, (uint32_t)atoi(t), NULL) : api.enable((uint32_t)atoi(t))) != 0)
            enable_errors++;
    const char *mix = getenv("SELFTEST_MIX");
    if (mix && *mix == '1') { /* deliberately use the other API family once */
        if (use_v2) mix_result = api.enable(10);
        else if (api.enable2) mix_result = api.enable2(sub, 10, NULL);
    }
    const char *fm = getenv("SELFTEST_FLUSH_MS");
    if (fm && atoi(fm) > 0) {
        pthread_t th;
        pthread_create(&th, NULL, flusher, (void *)(uintptr_t)atoi(fm));
        pthread_detach(th);
    }
    return 1;
}
