/* fake_nvml.c -- a GPU-free double of libnvidia-ml.so.1: the functions the
 * gputrace agent's sampler calls, with values and faults scripted by
 * environment variables. Signatures and values as in nvml.h (NVML 13.5,
 * PyPI nvidia-nvml-dev 13.5.37); nothing here needs the header.
 *
 * Devices: FAKE_NVML_DEVICES (default 1), with the UUIDs fake_cuda.c gives
 * (fake_gpu.h), so the agent matches them by UUID as with a real driver.
 *
 * Values: FAKE_NVML_<KEY>_<DEV> or FAKE_NVML_<KEY> = "v0,v1,...": the n-th
 * read of KEY on a device gives v[n] (the last repeats). KEY and the call:
 *   GPU_UTIL, MEM_UTIL   nvmlDeviceGetUtilizationRates (gpu, memory)
 *   SM_CLOCK, MEM_CLOCK  nvmlDeviceGetClockInfo(SM=1 / MEM=2)
 *   SM_CLOCK_MAX         nvmlDeviceGetMaxClockInfo(SM)
 *   POWER                nvmlDeviceGetPowerUsage (mW)
 *   ENERGY               nvmlDeviceGetTotalEnergyConsumption (mJ)
 *   TEMPERATURE          nvmlDeviceGetTemperature(GPU=0)
 *   THROTTLE             nvmlDeviceGetCurrentClocksEventReasons
 *   MEM_USED             nvmlDeviceGetMemoryInfo (.used; total 80 GiB)
 *   PCIE_TX, PCIE_RX     nvmlDeviceGetPcieThroughput(TX=0 / RX=1)
 *   NVLINK_TX, NVLINK_RX nvmlDeviceGetFieldValues, fields 138 / 139
 *                        (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX, KiB) with
 *                        scopeId UINT_MAX (the sum over links; another scope
 *                        answers NVML_ERROR_INVALID_ARGUMENT in nvmlReturn)
 *   ECC_UNCORRECTED,     nvmlDeviceGetTotalEccErrors(UNCORRECTED=1 /
 *   ECC_CORRECTED          CORRECTED=0, NVML_VOLATILE_ECC=0)
 * Unset keys read a fixed default (see defaults[]).
 *
 * XID events: FAKE_NVML_XID_<DEV> or FAKE_NVML_XID = "ms:xid,...": an XID
 * critical error event `xid` on the device `ms` after it was registered with
 * nvmlDeviceRegisterEvents (nvmlEventTypeXidCriticalError), delivered once by
 * nvmlEventSetWait_v2 of each set it is registered in, in time order.
 *
 * Faults:
 *   FAKE_NVML_FAIL="func[:code[:after]],..."  func returns code (default 999,
 *       NVML_ERROR_UNKNOWN) from its (after+1)-th call on, on every device.
 *       func "field138" / "field139" fails that field alone: the call
 *       succeeds and the field's nvmlReturn is code (as a GPU without NVLink
 *       answers NVML_ERROR_NOT_SUPPORTED, 3).
 *   FAKE_NVML_LOST_AFTER=N  after N utilization reads of a device, every call
 *       about that device returns NVML_ERROR_GPU_IS_LOST (15).
 *
 * Report: FAKE_NVML_REPORT=path gets one line per read, in call order:
 *   "<KEY> <dev> <value>" for a value returned, "FAIL <func> <dev> <code>" for
 *   a call that failed ("-" as dev for calls about no device), "XID <dev> <xid>"
 *   for an XID event delivered, and "CALL <func> <what>" for calls that
 *   return no value: "CALL nvmlDeviceRegisterEvents <dev>", "CALL
 *   nvmlEventSetFree -" and "CALL nvmlEventSetWait_v2 blocking=<ms>" (a wait
 *   with a timeout: the agent must never block; the fake does not wait). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fake_gpu.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEV 16
#define MAX_VALS 256

enum { GPU_UTIL, MEM_UTIL, SM_CLOCK, MEM_CLOCK, SM_CLOCK_MAX, POWER, ENERGY, TEMPERATURE, THROTTLE, MEM_USED,
       PCIE_TX, PCIE_RX, NVLINK_TX, NVLINK_RX, ECC_UNCORRECTED, ECC_CORRECTED, NKEYS };
static const char *keys[NKEYS] = {"GPU_UTIL",  "MEM_UTIL",  "SM_CLOCK",  "MEM_CLOCK",       "SM_CLOCK_MAX",
                                  "POWER",     "ENERGY",    "TEMPERATURE", "THROTTLE",      "MEM_USED",
                                  "PCIE_TX",   "PCIE_RX",   "NVLINK_TX", "NVLINK_RX",       "ECC_UNCORRECTED",
                                  "ECC_CORRECTED"};
static const unsigned long long defaults[NKEYS] = {
    90, 40, 1980, 2619, 1980, 650000, 1000000, 60, 0, 10ull << 30, 1000, 2000, 5000000, 6000000, 0, 0};

typedef struct { int index; } fake_device;
static fake_device devs[MAX_DEV];

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ndev = 1, lost_after = -1, initialised;
static unsigned long long vals[MAX_DEV][NKEYS][MAX_VALS];
static int nvals[MAX_DEV][NKEYS], reads[MAX_DEV][NKEYS], util_reads[MAX_DEV];
static FILE *report;

#define MAX_FAULTS 32
static struct { char func[96]; unsigned code; int after, calls; } faults[MAX_FAULTS];
static int nfaults;

#define MAX_XIDS 64
static struct { long long ms; unsigned long long xid; } xids[MAX_DEV][MAX_XIDS];
static int nxids[MAX_DEV];

static void parse_xids(int dev, const char *s) {
    int n = 0;
    while (s && *s && n < MAX_XIDS) {
        char *end;
        long long ms = strtoll(s, &end, 0);
        if (end == s || *end != ':') break;
        s = end + 1;
        unsigned long long xid = strtoull(s, &end, 0);
        if (end == s) break;
        xids[dev][n].ms = ms;
        xids[dev][n].xid = xid;
        n++;
        s = *end == ',' ? end + 1 : NULL;
    }
    nxids[dev] = n;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void parse_values(int dev, int key, const char *s) {
    int n = 0;
    while (s && *s && n < MAX_VALS) {
        char *end;
        unsigned long long v = strtoull(s, &end, 0);
        if (end == s) break;
        vals[dev][key][n++] = v;
        s = *end == ',' ? end + 1 : NULL;
    }
    nvals[dev][key] = n;
}

static void setup(void) {
    const char *e = getenv("FAKE_NVML_DEVICES");
    if (e) ndev = atoi(e);
    if (ndev < 0) ndev = 0;
    if (ndev > MAX_DEV) ndev = MAX_DEV;
    if ((e = getenv("FAKE_NVML_LOST_AFTER"))) lost_after = atoi(e);
    for (int d = 0; d < MAX_DEV; d++) {
        devs[d].index = d;
        for (int k = 0; k < NKEYS; k++) {
            char name[64];
            snprintf(name, sizeof name, "FAKE_NVML_%s_%d", keys[k], d);
            const char *v = getenv(name);
            if (!v) {
                snprintf(name, sizeof name, "FAKE_NVML_%s", keys[k]);
                v = getenv(name);
            }
            if (v) parse_values(d, k, v);
        }
        char name[64];
        snprintf(name, sizeof name, "FAKE_NVML_XID_%d", d);
        const char *x = getenv(name);
        if (!x) x = getenv("FAKE_NVML_XID");
        if (x) parse_xids(d, x);
    }
    if ((e = getenv("FAKE_NVML_FAIL"))) {
        char buf[2048];
        snprintf(buf, sizeof buf, "%s", e);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && nfaults < MAX_FAULTS;
             tok = strtok_r(NULL, ",", &save)) {
            char *c = strchr(tok, ':');
            faults[nfaults].code = 999;
            faults[nfaults].after = 0;
            if (c) {
                *c++ = 0;
                char *a = strchr(c, ':');
                if (a) *a++ = 0;
                faults[nfaults].code = (unsigned)strtoul(c, NULL, 0);
                if (a) faults[nfaults].after = atoi(a);
            }
            snprintf(faults[nfaults].func, sizeof faults[nfaults].func, "%s", tok);
            nfaults++;
        }
    }
    if ((e = getenv("FAKE_NVML_REPORT"))) report = fopen(e, "a");
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    if (!report) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(report, fmt, ap);
    va_end(ap);
    fflush(report);
}

/* A scripted fault for `func`, or 0. Call with mu held. */
static unsigned fault(const char *func) {
    for (int i = 0; i < nfaults; i++)
        if (strcmp(faults[i].func, func) == 0 && faults[i].calls++ >= faults[i].after) return faults[i].code;
    return 0;
}

/* Common checks of a device call; 0 or the code to return. Call with mu held. */
static unsigned device_call(const char *func, void *device, int *dev) {
    if (!initialised) return 1; /* NVML_ERROR_UNINITIALIZED */
    fake_device *fd = device;
    if (!fd || fd < devs || fd >= devs + ndev) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *dev = fd->index;
    unsigned f = fault(func);
    if (f) return f;
    /* Lost from the (N+1)-th utilization read on: the N rounds before it
     * read every value. */
    int util = strcmp(func, "nvmlDeviceGetUtilizationRates") == 0;
    if (lost_after >= 0 && util_reads[*dev] + util > lost_after) return 15;
    return 0;
}

static unsigned long long next_value(int dev, int key) {
    int n = nvals[dev][key], r = reads[dev][key]++;
    unsigned long long v = n == 0 ? defaults[key] : vals[dev][key][r < n ? r : n - 1];
    say("%s %d %llu\n", keys[key], dev, v);
    return v;
}

#define BEGIN(func)                                   \
    pthread_once(&once, setup);                       \
    pthread_mutex_lock(&mu);                          \
    int dev = -1;                                     \
    unsigned rc = device_call(func, device, &dev);    \
    if (rc) {                                         \
        if (dev >= 0) say("FAIL %s %d %u\n", func, dev, rc); \
        else say("FAIL %s - %u\n", func, rc);         \
        pthread_mutex_unlock(&mu);                    \
        return rc;                                    \
    }
#define END                                           \
    pthread_mutex_unlock(&mu);                        \
    return 0;

EXPORT unsigned nvmlInit_v2(void) {
    pthread_once(&once, setup);
    pthread_mutex_lock(&mu);
    unsigned rc = fault("nvmlInit_v2");
    if (rc) say("FAIL nvmlInit_v2 - %u\n", rc);
    else initialised = 1;
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT unsigned nvmlShutdown(void) { return 0; }

EXPORT unsigned nvmlDeviceGetCount_v2(unsigned *count) {
    pthread_once(&once, setup);
    if (!initialised) return 1;
    if (!count) return 2;
    *count = (unsigned)ndev;
    return 0;
}

EXPORT unsigned nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
    pthread_once(&once, setup);
    pthread_mutex_lock(&mu);
    unsigned rc = !initialised ? 1 : !device ? 2 : fault("nvmlDeviceGetHandleByIndex_v2");
    if (!rc && index >= (unsigned)ndev) rc = 2;
    if (!rc) *device = &devs[index];
    else say("FAIL nvmlDeviceGetHandleByIndex_v2 - %u\n", rc);
    pthread_mutex_unlock(&mu);
    return rc;
}

static void uuid_of(int d, char out[64]) {
    unsigned char u[16] = FAKE_GPU_UUID_INIT;
    u[15] ^= (unsigned char)d;
    snprintf(out, 64, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
             u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

EXPORT unsigned nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    pthread_once(&once, setup);
    pthread_mutex_lock(&mu);
    unsigned rc = !initialised ? 1 : (!device || !uuid) ? 2 : fault("nvmlDeviceGetHandleByUUID");
    if (!rc) {
        rc = 6; /* NVML_ERROR_NOT_FOUND */
        for (int d = 0; d < ndev; d++) {
            char u[64];
            uuid_of(d, u);
            if (strcmp(u, uuid) == 0) {
                *device = &devs[d];
                rc = 0;
            }
        }
    }
    if (rc) say("FAIL nvmlDeviceGetHandleByUUID - %u\n", rc);
    pthread_mutex_unlock(&mu);
    return rc;
}

typedef struct { unsigned gpu, memory; } utilization;
typedef struct { unsigned long long total, free, used; } memory;

EXPORT unsigned nvmlDeviceGetUtilizationRates(void *device, utilization *u) {
    BEGIN("nvmlDeviceGetUtilizationRates")
    util_reads[dev]++;
    u->gpu = (unsigned)next_value(dev, GPU_UTIL);
    u->memory = (unsigned)next_value(dev, MEM_UTIL);
    END
}

EXPORT unsigned nvmlDeviceGetClockInfo(void *device, unsigned type, unsigned *clock) {
    BEGIN("nvmlDeviceGetClockInfo")
    if (type != 1 && type != 2) {
        pthread_mutex_unlock(&mu);
        return 2;
    }
    *clock = (unsigned)next_value(dev, type == 1 ? SM_CLOCK : MEM_CLOCK);
    END
}

EXPORT unsigned nvmlDeviceGetMaxClockInfo(void *device, unsigned type, unsigned *clock) {
    BEGIN("nvmlDeviceGetMaxClockInfo")
    if (type != 1) {
        pthread_mutex_unlock(&mu);
        return 3; /* only SM is scripted */
    }
    *clock = (unsigned)next_value(dev, SM_CLOCK_MAX);
    END
}

EXPORT unsigned nvmlDeviceGetPowerUsage(void *device, unsigned *power) {
    BEGIN("nvmlDeviceGetPowerUsage")
    *power = (unsigned)next_value(dev, POWER);
    END
}

EXPORT unsigned nvmlDeviceGetTotalEnergyConsumption(void *device, unsigned long long *energy) {
    BEGIN("nvmlDeviceGetTotalEnergyConsumption")
    *energy = next_value(dev, ENERGY);
    END
}

EXPORT unsigned nvmlDeviceGetTemperature(void *device, unsigned sensor, unsigned *temp) {
    BEGIN("nvmlDeviceGetTemperature")
    if (sensor != 0) {
        pthread_mutex_unlock(&mu);
        return 2;
    }
    *temp = (unsigned)next_value(dev, TEMPERATURE);
    END
}

EXPORT unsigned nvmlDeviceGetCurrentClocksEventReasons(void *device, unsigned long long *reasons) {
    BEGIN("nvmlDeviceGetCurrentClocksEventReasons")
    *reasons = next_value(dev, THROTTLE);
    END
}

EXPORT unsigned nvmlDeviceGetMemoryInfo(void *device, memory *m) {
    BEGIN("nvmlDeviceGetMemoryInfo")
    m->total = FAKE_GPU_TOTAL_MEM;
    m->used = next_value(dev, MEM_USED);
    m->free = m->used < m->total ? m->total - m->used : 0;
    END
}

EXPORT unsigned nvmlDeviceGetPcieThroughput(void *device, unsigned counter, unsigned *value) {
    BEGIN("nvmlDeviceGetPcieThroughput")
    if (counter > 1) {
        pthread_mutex_unlock(&mu);
        return 2;
    }
    *value = (unsigned)next_value(dev, counter == 0 ? PCIE_TX : PCIE_RX);
    END
}

typedef union { double d; int si; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; unsigned short us; } value;
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned valueType, nvmlReturn;
    value value;
} field_value;

EXPORT unsigned nvmlDeviceGetFieldValues(void *device, int count, field_value *values) {
    BEGIN("nvmlDeviceGetFieldValues")
    if (count < 0 || !values) {
        pthread_mutex_unlock(&mu);
        return 2;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (int i = 0; i < count; i++) {
        field_value *v = &values[i];
        v->timestamp = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        v->latencyUsec = 1;
        if (v->fieldId != 138 && v->fieldId != 139) {
            v->nvmlReturn = 3; /* only the NVLink data counters are scripted */
            continue;
        }
        char name[32];
        snprintf(name, sizeof name, "field%u", v->fieldId);
        unsigned f = fault(name);
        if (!f && v->scopeId != 0xFFFFFFFFu) f = 2;
        if (f) {
            v->nvmlReturn = f;
            say("FAIL %s %d %u\n", name, dev, f);
            continue;
        }
        v->nvmlReturn = 0;
        v->valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
        v->value.ull = next_value(dev, v->fieldId == 138 ? NVLINK_TX : NVLINK_RX);
    }
    END
}

EXPORT unsigned nvmlDeviceGetTotalEccErrors(void *device, unsigned type, unsigned counter, unsigned long long *count) {
    BEGIN("nvmlDeviceGetTotalEccErrors")
    if (type > 1 || counter != 0 || !count) {
        pthread_mutex_unlock(&mu);
        return 2; /* only the volatile counts are scripted */
    }
    *count = next_value(dev, type == 1 ? ECC_UNCORRECTED : ECC_CORRECTED);
    END
}

/* An event set: which devices are registered for XIDs since when, and how
 * many of each device's scripted XIDs it delivered. */
typedef struct {
    int magic;
    int registered[MAX_DEV];
    long long since_ms[MAX_DEV];
    int delivered[MAX_DEV];
} fake_set;
#define SET_MAGIC 0x5e7
typedef struct { void *device; unsigned long long eventType, eventData; unsigned gpuInstanceId, computeInstanceId; } event_data;

EXPORT unsigned nvmlEventSetCreate(fake_set **set) {
    pthread_once(&once, setup);
    pthread_mutex_lock(&mu);
    unsigned rc = !initialised ? 1 : !set ? 2 : fault("nvmlEventSetCreate");
    if (!rc) {
        *set = calloc(1, sizeof **set);
        if (*set) (*set)->magic = SET_MAGIC;
        else rc = 999;
    }
    if (rc) say("FAIL nvmlEventSetCreate - %u\n", rc);
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT unsigned nvmlDeviceRegisterEvents(void *device, unsigned long long types, fake_set *set) {
    BEGIN("nvmlDeviceRegisterEvents")
    if (!set || set->magic != SET_MAGIC) {
        pthread_mutex_unlock(&mu);
        return 2;
    }
    if (types & 0x8) { /* nvmlEventTypeXidCriticalError */
        set->registered[dev] = 1;
        set->since_ms[dev] = now_ms();
    }
    say("CALL nvmlDeviceRegisterEvents %d\n", dev);
    END
}

EXPORT unsigned nvmlEventSetWait_v2(fake_set *set, event_data *data, unsigned timeoutms) {
    pthread_once(&once, setup);
    pthread_mutex_lock(&mu);
    unsigned rc = !initialised ? 1 : (!set || set->magic != SET_MAGIC || !data) ? 2 : fault("nvmlEventSetWait_v2");
    if (rc) {
        say("FAIL nvmlEventSetWait_v2 - %u\n", rc);
        pthread_mutex_unlock(&mu);
        return rc;
    }
    if (timeoutms) say("CALL nvmlEventSetWait_v2 blocking=%u\n", timeoutms);
    /* The earliest XID that is due, over the registered devices. */
    long long now = now_ms(), best = 0;
    int bd = -1;
    for (int d = 0; d < ndev; d++) {
        if (!set->registered[d] || set->delivered[d] >= nxids[d]) continue;
        long long at = set->since_ms[d] + xids[d][set->delivered[d]].ms;
        if (at <= now && (bd < 0 || at < best)) {
            bd = d;
            best = at;
        }
    }
    if (bd < 0) {
        pthread_mutex_unlock(&mu);
        return 10; /* NVML_ERROR_TIMEOUT */
    }
    unsigned long long xid = xids[bd][set->delivered[bd]++].xid;
    data->device = &devs[bd];
    data->eventType = 0x8;
    data->eventData = xid;
    data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
    say("XID %d %llu\n", bd, xid);
    pthread_mutex_unlock(&mu);
    return 0;
}

EXPORT unsigned nvmlEventSetFree(fake_set *set) {
    pthread_once(&once, setup);
    pthread_mutex_lock(&mu);
    unsigned rc = !initialised ? 1 : (!set || set->magic != SET_MAGIC) ? 2 : 0;
    if (!rc) {
        set->magic = 0;
        free(set);
        say("CALL nvmlEventSetFree -\n");
    } else {
        say("FAIL nvmlEventSetFree - %u\n", rc);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT const char *nvmlErrorString(unsigned code) {
    switch (code) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}
