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

static struct {
    int (*subscribe)(void **, void *, void *);
    int (*reg)(req_fn, cpl_fn);
    fn_u32 enable, flush, set_tid_type;
    int (*finalize)(void);
    int (*next)(uint8_t *, size_t, void **);
    int (*dropped)(void *, uint32_t, size_t *);
} api;

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
        int r = api.next(buf, valid, &rec);
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

static void at_exit(void) {
    if (child || subscribe_result != 0) goto write;
    api.flush(1);
    size_t d = 0;
    if (api.dropped(NULL, 0, &d) == 0) {
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
               "subscribe_result %d\nenable_errors %d\n",
            (unsigned long long)other_kinds, (unsigned long long)null_names,
            (unsigned long long)invalid_stops, (unsigned long long)bad_ts,
            (unsigned long long)buffers, (unsigned long long)empty_buffers,
            (unsigned long long)bytes, (unsigned long long)dropped_total,
            (unsigned long long)api_no_kernel, (unsigned long long)kernel_no_api, max_in_cb,
            subscribe_result, enable_errors);
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
        if (api.dropped(NULL, 0, &d) == 0) {
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
    if (!api.subscribe || !api.reg || !api.enable || !api.flush || !api.next || !api.dropped)
        return 0;
    const char *bs = getenv("SELFTEST_BUFSZ");
    if (bs && atol(bs) > 0) bufsz = (size_t)atol(bs);
    kernel_corr = calloc(CORR_MAX, 1);
    api_corr = calloc(CORR_MAX, 1);
    void *sub = NULL;
    subscribe_result = api.subscribe(&sub, NULL, NULL);
    if (subscribe_result != 0) return 0; /* e.g. 39: another tool owns CUPTI */
    api.set_tid_type(1);
    if (api.reg(buffer_requested, buffer_completed) != 0) return 0;
    const char *ks = getenv("SELFTEST_KINDS");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ks && *ks ? ks : "10,1,2,5,38,22,17,8");
    for (char *s = NULL, *t = strtok_r(buf, ",", &s); t; t = strtok_r(NULL, ",", &s))
        if (api.enable((uint32_t)atoi(t)) != 0) enable_errors++;
    const char *fm = getenv("SELFTEST_FLUSH_MS");
    if (fm && atoi(fm) > 0) {
        pthread_t th;
        pthread_create(&th, NULL, flusher, (void *)(uintptr_t)atoi(fm));
        pthread_detach(th);
    }
    return 1;
}
