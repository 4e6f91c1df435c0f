/*
 * Fake CUPTI PM sampling and profiler host API (CUPTI 12.6+), linked into
 * the fake libcupti (fake_cupti.c) by build.sh. The `cupti-nopm` build
 * leaves this file out: a CUPTI without these symbols (older than 12.6).
 *
 * Everything is scripted by the file named in FAKE_PM_SCRIPT, one
 * directive a line (`#` starts a comment):
 *
 *   chip NAME                 cuptiDeviceGetChipName's answer (default GH100)
 *   metrics N1 N2 ...         the metrics this "chip" knows, in the column
 *                             order of `sample` lines; ConfigAddMetrics and
 *                             EvaluateToGpuValues refuse any other name with
 *                             CUPTI_ERROR_INVALID_PARAMETER
 *   sample START END V1 V2 .. one sample: START/END are ns after the moment
 *                             cuptiPmSamplingStart was called (on
 *                             cuptiGetTimestamp's clock), V are the values
 *                             EvaluateToGpuValues returns, per column
 *   batch N                   samples the "hardware" holds per decode call
 *                             (default 8): each DecodeData takes at most N
 *   overflow ROUND DROP       decode call ROUND (1-based) reports a hardware
 *                             buffer overflow (overflow = 1 and
 *                             CUPTI_ERROR_OUT_OF_MEMORY, as the header says)
 *                             and the DROP samples after its batch are lost
 *   fail FUNCTION CODE [AFTER] FUNCTION returns CODE once it has succeeded
 *                             AFTER times (default 0), and on every later call
 *
 * FAKE_PM_REPORT names a file the fake appends to:
 *   CALL FUNCTION             each call (with its result when not 0: `= CODE`)
 *   START T0                  cuptiGetTimestamp's value at Start
 *   CONFIG INTERVAL HWBUF TRIGGER APPEND
 *   METRIC NAME               each metric added to the config
 *   DECODED N                 samples a decode call delivered
 *   LOST N                    samples dropped by a scripted overflow
 *
 * The counter data image is the fake's own format (CUPTI's is opaque to
 * its users): a header of three u64 (magic, capacity, count) and one u64
 * script index per decoded sample.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUptiResult;
enum {
    OK = 0,
    E_INVALID_PARAMETER = 1,
    E_INVALID_OPERATION = 7,
    E_OUT_OF_MEMORY = 8,
};

/* cuptiGetTimestamp of fake_cupti.c: the same clock as activity records. */
extern CUptiResult cuptiGetTimestamp(uint64_t *timestamp);

/* The structs, field for field as in cupti_pmsampling.h, cupti_target.h,
 * cupti_profiler_target.h and cupti_profiler_host.h (12.6 through 13.5). */
typedef struct { size_t structSize; void *pPriv; size_t deviceIndex; const char *pChipName; } GetChipName_Params;
typedef struct { size_t structSize; void *pPriv; } ProfilerInitialize_Params;
typedef struct {
    size_t structSize; void *pPriv; size_t deviceIndex;
    size_t counterAvailabilityImageSize; uint8_t *pCounterAvailabilityImage;
} GetCounterAvailability_Params;
typedef struct {
    size_t structSize; void *pPriv; int profilerType; const char *pChipName;
    const uint8_t *pCounterAvailabilityImage; void *pHostObject;
    const char *pSinglePassMetricSetName; /* 13.x only */
} HostInitialize_Params;
typedef struct { size_t structSize; void *pPriv; void *pHostObject; } HostDeinitialize_Params;
typedef struct {
    size_t structSize; void *pPriv; void *pHostObject; const char **ppMetricNames; size_t numMetrics;
} ConfigAddMetrics_Params;
typedef struct { size_t structSize; void *pPriv; void *pHostObject; size_t configImageSize; } GetConfigImageSize_Params;
typedef struct {
    size_t structSize; void *pPriv; void *pHostObject; size_t configImageSize; uint8_t *pConfigImage;
} GetConfigImage_Params;
typedef struct {
    size_t structSize; void *pPriv; void *pHostObject; const uint8_t *pCounterDataImage;
    size_t counterDataImageSize; size_t rangeIndex; const char **ppMetricNames; size_t numMetrics;
    double *pMetricValues;
} Evaluate_Params;
typedef struct { size_t structSize; void *pPriv; size_t deviceIndex; void *pPmSamplingObject; } Enable_Params;
typedef struct { size_t structSize; void *pPriv; void *pPmSamplingObject; } Object_Params; /* Disable, Start, Stop */
typedef struct {
    size_t structSize; void *pPriv; void *pPmSamplingObject; size_t configSize; const uint8_t *pConfig;
    size_t hardwareBufferSize; uint64_t samplingInterval; int triggerMode; int hwBufferAppendMode;
} SetConfig_Params;
typedef struct {
    size_t structSize; void *pPriv; void *pPmSamplingObject; const char **pMetricNames; size_t numMetrics;
    uint32_t maxSamples; size_t counterDataSize;
} GetCounterDataSize_Params;
typedef struct {
    size_t structSize; void *pPriv; void *pPmSamplingObject; size_t counterDataSize; uint8_t *pCounterData;
} CounterDataInit_Params;
typedef struct {
    size_t structSize; void *pPriv; void *pPmSamplingObject; uint8_t *pCounterDataImage;
    size_t counterDataImageSize; int decodeStopReason; uint8_t overflow;
} DecodeData_Params;
typedef struct {
    size_t structSize; void *pPriv; const uint8_t *pCounterDataImage; size_t counterDataImageSize;
    size_t numTotalSamples; size_t numPopulatedSamples; size_t numCompletedSamples;
} GetCounterDataInfo_Params;
typedef struct {
    size_t structSize; void *pPriv; void *pPmSamplingObject; const uint8_t *pCounterDataImage;
    size_t counterDataImageSize; size_t sampleIndex; uint64_t startTimestamp; uint64_t endTimestamp;
} GetSampleInfo_Params;

/* The same numbers as cupti-sys/tests/generated.rs pins for the generated
 * bindings (x86_64). */
_Static_assert(sizeof(GetChipName_Params) == 32, "GetChipName");
_Static_assert(sizeof(GetCounterAvailability_Params) == 40, "GetCounterAvailability");
_Static_assert(offsetof(HostInitialize_Params, pHostObject) == 40, "HostInitialize");
_Static_assert(sizeof(HostInitialize_Params) == 56, "HostInitialize (13.x)");
_Static_assert(sizeof(ConfigAddMetrics_Params) == 40, "ConfigAddMetrics");
_Static_assert(sizeof(Evaluate_Params) == 72 && offsetof(Evaluate_Params, rangeIndex) == 40, "Evaluate");
_Static_assert(sizeof(Enable_Params) == 32 && sizeof(Object_Params) == 24, "Enable/Start/Stop/Disable");
_Static_assert(sizeof(SetConfig_Params) == 64 && offsetof(SetConfig_Params, triggerMode) == 56, "SetConfig");
_Static_assert(sizeof(GetCounterDataSize_Params) == 56 && offsetof(GetCounterDataSize_Params, counterDataSize) == 48,
               "GetCounterDataSize");
_Static_assert(sizeof(CounterDataInit_Params) == 40, "CounterDataImageInitialize");
_Static_assert(sizeof(DecodeData_Params) == 48 && offsetof(DecodeData_Params, overflow) == 44, "DecodeData");
_Static_assert(sizeof(GetCounterDataInfo_Params) == 56, "GetCounterDataInfo");
_Static_assert(sizeof(GetSampleInfo_Params) == 64 && offsetof(GetSampleInfo_Params, startTimestamp) == 48,
               "GetSampleInfo");

#define MAX_METRICS 16
#define MAX_SAMPLES 100000
#define MAX_FAILS 16
#define IMAGE_MAGIC 0x46414b45504d3031ull /* "FAKEPM01" */
#define HOST_OBJECT ((void *)0x40570b1ull)
#define PM_OBJECT ((void *)0x9b5a3bull)

struct sample { uint64_t start, end; double v[MAX_METRICS]; };
struct fail { char fn[64]; int code; int after; int calls; };

static struct {
    pthread_mutex_t lock;
    int loaded;
    char chip[64];
    int n_metrics;
    char metric[MAX_METRICS][128];
    struct sample *samples;
    int n_samples;
    int batch;
    int overflow_round, overflow_drop;
    struct fail fails[MAX_FAILS];
    int n_fails;
    /* run-time state */
    int enabled, started, host_ready, configured;
    uint64_t t0;
    int next; /* the next script sample the "hardware" delivers */
    int decode_round;
} pm = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...) {
    const char *path = getenv("FAKE_PM_REPORT");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static void load_locked(void) {
    if (pm.loaded) return;
    pm.loaded = 1;
    strcpy(pm.chip, "GH100");
    pm.batch = 8;
    pm.samples = calloc(MAX_SAMPLES, sizeof *pm.samples);
    const char *path = getenv("FAKE_PM_SCRIPT");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
        if (!tok) continue;
        if (!strcmp(tok, "chip")) {
            char *n = strtok_r(NULL, " \t\r\n", &save);
            if (n) snprintf(pm.chip, sizeof pm.chip, "%s", n);
        } else if (!strcmp(tok, "metrics")) {
            char *n;
            while ((n = strtok_r(NULL, " \t\r\n", &save)) && pm.n_metrics < MAX_METRICS)
                snprintf(pm.metric[pm.n_metrics++], sizeof pm.metric[0], "%s", n);
        } else if (!strcmp(tok, "sample") && pm.samples && pm.n_samples < MAX_SAMPLES) {
            struct sample *s = &pm.samples[pm.n_samples++];
            char *a = strtok_r(NULL, " \t\r\n", &save), *b = strtok_r(NULL, " \t\r\n", &save);
            s->start = a ? strtoull(a, NULL, 10) : 0;
            s->end = b ? strtoull(b, NULL, 10) : 0;
            for (int i = 0; i < MAX_METRICS; i++) {
                char *v = strtok_r(NULL, " \t\r\n", &save);
                if (!v) break;
                s->v[i] = strtod(v, NULL);
            }
        } else if (!strcmp(tok, "batch")) {
            char *n = strtok_r(NULL, " \t\r\n", &save);
            if (n) pm.batch = atoi(n) > 0 ? atoi(n) : 1;
        } else if (!strcmp(tok, "overflow")) {
            char *r = strtok_r(NULL, " \t\r\n", &save), *d = strtok_r(NULL, " \t\r\n", &save);
            pm.overflow_round = r ? atoi(r) : 0;
            pm.overflow_drop = d ? atoi(d) : 0;
        } else if (!strcmp(tok, "fail") && pm.n_fails < MAX_FAILS) {
            struct fail *x = &pm.fails[pm.n_fails++];
            char *n = strtok_r(NULL, " \t\r\n", &save), *c = strtok_r(NULL, " \t\r\n", &save);
            char *a = strtok_r(NULL, " \t\r\n", &save);
            snprintf(x->fn, sizeof x->fn, "%s", n ? n : "");
            x->code = c ? atoi(c) : 999;
            x->after = a ? atoi(a) : 0;
        }
    }
    fclose(f);
}

/* Take the lock, load the script, log the call; a scripted failure is
 * returned at once (the lock released). */
static int enter(const char *fn) {
    pthread_mutex_lock(&pm.lock);
    load_locked();
    for (int i = 0; i < pm.n_fails; i++) {
        struct fail *x = &pm.fails[i];
        if (strcmp(x->fn, fn)) continue;
        if (x->calls++ >= x->after) {
            report("CALL %s = %d", fn, x->code);
            pthread_mutex_unlock(&pm.lock);
            return x->code;
        }
    }
    report("CALL %s", fn);
    return OK;
}
#define ENTER(fn)                                                              \
    do {                                                                       \
        int r_ = enter(#fn);                                                   \
        if (r_ != OK) return r_;                                               \
    } while (0)
#define RETURN(v)                                                              \
    do {                                                                       \
        CUptiResult v_ = (v);                                                  \
        if (v_ != OK) report("RESULT %d", v_);                                 \
        pthread_mutex_unlock(&pm.lock);                                        \
        return v_;                                                             \
    } while (0)

static int metric_index(const char *name) {
    for (int i = 0; name && i < pm.n_metrics; i++)
        if (!strcmp(pm.metric[i], name)) return i;
    return -1;
}

EXPORT CUptiResult cuptiProfilerInitialize(ProfilerInitialize_Params *p) {
    ENTER(cuptiProfilerInitialize);
    RETURN(p && p->structSize ? OK : E_INVALID_PARAMETER);
}
EXPORT CUptiResult cuptiProfilerDeInitialize(ProfilerInitialize_Params *p) {
    ENTER(cuptiProfilerDeInitialize);
    RETURN(p && p->structSize ? OK : E_INVALID_PARAMETER);
}
EXPORT CUptiResult cuptiDeviceGetChipName(GetChipName_Params *p) {
    ENTER(cuptiDeviceGetChipName);
    if (!p || p->structSize < offsetof(GetChipName_Params, pChipName) + sizeof(void *)) RETURN(E_INVALID_PARAMETER);
    p->pChipName = pm.chip;
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingGetCounterAvailability(GetCounterAvailability_Params *p) {
    ENTER(cuptiPmSamplingGetCounterAvailability);
    if (!p || !p->structSize) RETURN(E_INVALID_PARAMETER);
    if (!p->pCounterAvailabilityImage) {
        p->counterAvailabilityImageSize = 32;
        RETURN(OK);
    }
    if (p->counterAvailabilityImageSize < 32) RETURN(E_INVALID_PARAMETER);
    memset(p->pCounterAvailabilityImage, 0xa5, 32);
    RETURN(OK);
}
EXPORT CUptiResult cuptiProfilerHostInitialize(HostInitialize_Params *p) {
    ENTER(cuptiProfilerHostInitialize);
    /* 12.x callers end the struct at pHostObject. */
    if (!p || p->structSize < offsetof(HostInitialize_Params, pHostObject) + sizeof(void *)) RETURN(E_INVALID_PARAMETER);
    if (p->profilerType != 1 || !p->pChipName || strcmp(p->pChipName, pm.chip) || !p->pCounterAvailabilityImage)
        RETURN(E_INVALID_PARAMETER);
    p->pHostObject = HOST_OBJECT;
    pm.host_ready = 1;
    RETURN(OK);
}
EXPORT CUptiResult cuptiProfilerHostDeinitialize(HostDeinitialize_Params *p) {
    ENTER(cuptiProfilerHostDeinitialize);
    if (!p || p->pHostObject != HOST_OBJECT) RETURN(E_INVALID_PARAMETER);
    pm.host_ready = 0;
    RETURN(OK);
}
EXPORT CUptiResult cuptiProfilerHostConfigAddMetrics(ConfigAddMetrics_Params *p) {
    ENTER(cuptiProfilerHostConfigAddMetrics);
    if (!p || p->pHostObject != HOST_OBJECT || !p->ppMetricNames) RETURN(E_INVALID_PARAMETER);
    for (size_t i = 0; i < p->numMetrics; i++)
        if (metric_index(p->ppMetricNames[i]) < 0) RETURN(E_INVALID_PARAMETER);
    for (size_t i = 0; i < p->numMetrics; i++) report("METRIC %s", p->ppMetricNames[i]);
    RETURN(OK);
}
EXPORT CUptiResult cuptiProfilerHostGetConfigImageSize(GetConfigImageSize_Params *p) {
    ENTER(cuptiProfilerHostGetConfigImageSize);
    if (!p || p->pHostObject != HOST_OBJECT) RETURN(E_INVALID_PARAMETER);
    p->configImageSize = 64;
    RETURN(OK);
}
EXPORT CUptiResult cuptiProfilerHostGetConfigImage(GetConfigImage_Params *p) {
    ENTER(cuptiProfilerHostGetConfigImage);
    if (!p || p->pHostObject != HOST_OBJECT || !p->pConfigImage || p->configImageSize < 64) RETURN(E_INVALID_PARAMETER);
    memset(p->pConfigImage, 0x3c, 64);
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingEnable(Enable_Params *p) {
    ENTER(cuptiPmSamplingEnable);
    if (!p || !p->structSize) RETURN(E_INVALID_PARAMETER);
    if (pm.enabled) RETURN(E_INVALID_OPERATION);
    pm.enabled = 1;
    p->pPmSamplingObject = PM_OBJECT;
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingDisable(Object_Params *p) {
    ENTER(cuptiPmSamplingDisable);
    if (!p || p->pPmSamplingObject != PM_OBJECT || !pm.enabled) RETURN(E_INVALID_PARAMETER);
    pm.enabled = 0;
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingSetConfig(SetConfig_Params *p) {
    ENTER(cuptiPmSamplingSetConfig);
    if (!p || p->pPmSamplingObject != PM_OBJECT || !p->pConfig || p->configSize < 64 || !p->samplingInterval)
        RETURN(E_INVALID_PARAMETER);
    report("CONFIG %llu %zu %d %d", (unsigned long long)p->samplingInterval, p->hardwareBufferSize, p->triggerMode,
           p->hwBufferAppendMode);
    pm.configured = 1;
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingStart(Object_Params *p) {
    ENTER(cuptiPmSamplingStart);
    if (!p || p->pPmSamplingObject != PM_OBJECT || !pm.configured) RETURN(E_INVALID_PARAMETER);
    if (pm.started) RETURN(E_INVALID_OPERATION);
    pm.started = 1;
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    pm.t0 = t;
    report("START %llu", (unsigned long long)t);
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingStop(Object_Params *p) {
    ENTER(cuptiPmSamplingStop);
    if (!p || p->pPmSamplingObject != PM_OBJECT || !pm.started) RETURN(E_INVALID_OPERATION);
    pm.started = 0;
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingGetCounterDataSize(GetCounterDataSize_Params *p) {
    ENTER(cuptiPmSamplingGetCounterDataSize);
    if (!p || p->pPmSamplingObject != PM_OBJECT || !p->maxSamples) RETURN(E_INVALID_PARAMETER);
    p->counterDataSize = 24 + 8 * (size_t)p->maxSamples;
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingCounterDataImageInitialize(CounterDataInit_Params *p) {
    ENTER(cuptiPmSamplingCounterDataImageInitialize);
    if (!p || p->pPmSamplingObject != PM_OBJECT || !p->pCounterData || p->counterDataSize < 32) RETURN(E_INVALID_PARAMETER);
    uint64_t h[3] = {IMAGE_MAGIC, (p->counterDataSize - 24) / 8, 0};
    memcpy(p->pCounterData, h, sizeof h);
    RETURN(OK);
}

/* The image's header, or 0 when it is not one of ours. */
static int image_header(const uint8_t *img, size_t size, uint64_t h[3]) {
    if (!img || size < 24) return 0;
    memcpy(h, img, 24);
    return h[0] == IMAGE_MAGIC && 24 + 8 * h[1] <= size && h[2] <= h[1];
}

EXPORT CUptiResult cuptiPmSamplingDecodeData(DecodeData_Params *p) {
    ENTER(cuptiPmSamplingDecodeData);
    uint64_t h[3];
    if (!p || p->pPmSamplingObject != PM_OBJECT || !image_header(p->pCounterDataImage, p->counterDataImageSize, h))
        RETURN(E_INVALID_PARAMETER);
    pm.decode_round++;
    p->overflow = 0;
    int took = 0;
    while (took < pm.batch && pm.next < pm.n_samples && h[2] < h[1]) {
        uint64_t idx = (uint64_t)pm.next++;
        memcpy(p->pCounterDataImage + 24 + 8 * h[2], &idx, 8);
        h[2]++;
        took++;
    }
    memcpy(p->pCounterDataImage, h, 24);
    report("DECODED %d", took);
    p->decodeStopReason = h[2] == h[1] ? 1 /* COUNTER_DATA_FULL */ : 2 /* END_OF_RECORDS */;
    if (pm.decode_round == pm.overflow_round) {
        int drop = pm.overflow_drop;
        if (drop > pm.n_samples - pm.next) drop = pm.n_samples - pm.next;
        pm.next += drop;
        report("LOST %d", drop);
        p->overflow = 1;
        RETURN(E_OUT_OF_MEMORY);
    }
    RETURN(OK);
}
EXPORT CUptiResult cuptiPmSamplingGetCounterDataInfo(GetCounterDataInfo_Params *p) {
    ENTER(cuptiPmSamplingGetCounterDataInfo);
    uint64_t h[3];
    if (!p || !image_header(p->pCounterDataImage, p->counterDataImageSize, h)) RETURN(E_INVALID_PARAMETER);
    p->numTotalSamples = h[1];
    p->numPopulatedSamples = h[2];
    p->numCompletedSamples = h[2];
    RETURN(OK);
}
/* The script sample stored at `index` of the image, or NULL. */
static struct sample *sample_at(const uint8_t *img, size_t size, size_t index) {
    uint64_t h[3], idx;
    if (!image_header(img, size, h) || index >= h[2]) return NULL;
    memcpy(&idx, img + 24 + 8 * index, 8);
    return idx < (uint64_t)pm.n_samples ? &pm.samples[idx] : NULL;
}
EXPORT CUptiResult cuptiPmSamplingCounterDataGetSampleInfo(GetSampleInfo_Params *p) {
    ENTER(cuptiPmSamplingCounterDataGetSampleInfo);
    struct sample *s = p ? sample_at(p->pCounterDataImage, p->counterDataImageSize, p->sampleIndex) : NULL;
    if (!s || p->pPmSamplingObject != PM_OBJECT) RETURN(E_INVALID_PARAMETER);
    p->startTimestamp = pm.t0 + s->start;
    p->endTimestamp = pm.t0 + s->end;
    RETURN(OK);
}
EXPORT CUptiResult cuptiProfilerHostEvaluateToGpuValues(Evaluate_Params *p) {
    ENTER(cuptiProfilerHostEvaluateToGpuValues);
    struct sample *s = p ? sample_at(p->pCounterDataImage, p->counterDataImageSize, p->rangeIndex) : NULL;
    if (!s || p->pHostObject != HOST_OBJECT || !p->ppMetricNames || !p->pMetricValues) RETURN(E_INVALID_PARAMETER);
    for (size_t i = 0; i < p->numMetrics; i++) {
        int m = metric_index(p->ppMetricNames[i]);
        if (m < 0) RETURN(E_INVALID_PARAMETER);
        p->pMetricValues[i] = s->v[m];
    }
    RETURN(OK);
}
