/* fake_cuda.c -- a test double for the CUDA driver, built as libcuda.so.1.
 *
 * What it reproduces (see shared/research/cupti-nccl-formats.md section 1.1):
 *  - The FIRST cuInit(0) in the process reads CUDA_INJECTION64_PATH; if it is
 *    set, non-empty and not "none", it dlopen()s it (RTLD_NOW|RTLD_LOCAL) and
 *    calls its `int InitializeInjection(void)` on the calling thread, before
 *    cuInit returns. Later cuInit calls do nothing (and wait while the first
 *    one is still running, unless they come from inside the injection on the
 *    same thread, which returns CUDA_SUCCESS at once).
 *  - Device queries for one (or N) fake GPUs described by fake_gpu.h.
 *
 * Test hooks (not in the real driver):
 *  int  fakecuda_injection_result(void)  InitializeInjection's return value;
 *                                         -1 not attempted, -2 dlopen failed,
 *                                         -3 no InitializeInjection symbol.
 *  void fakecuda_work(unsigned ms)       sleep up to ms, returning early once
 *                                         the fake CUPTI reports its scenario
 *                                         done (or finalized).
 *  void fakecuda__register_cupti(done, ready)
 *                                         called by fake_cupti.c; `ready`
 *                                         runs when cuInit has finished, and
 *                                         the fake CUPTI plays nothing before.
 *
 * Scenario lines it reads from $FAKE_CUPTI_SCENARIO (others are ignored):
 *   cuda_driver_version N   (default 13000)
 *   cuda_device_count N     (default 1)
 *   cuda_init_error N       cuInit returns N and injects nothing
 * $FAKE_CUDA_VERBOSE=1 prints injection problems on stderr.
 *
 * Result codes are the CUDA driver API's (cuda.h): SUCCESS 0,
 * INVALID_VALUE 1, NOT_INITIALIZED 3, INVALID_DEVICE 101.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_gpu.h"

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef struct {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
};
enum {
    ATTR_MULTIPROCESSOR_COUNT = 16,
    ATTR_PCI_BUS_ID = 33,
    ATTR_PCI_DEVICE_ID = 34,
    ATTR_PCI_DOMAIN_ID = 50,
    ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
    ATTR_COMPUTE_CAPABILITY_MINOR = 76,
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0 never called, 1 initialising (injection running), 2 done */
    pthread_t init_thread;
    int injection_result;
    int driver_version, device_count, init_error;
    int (*cupti_done)(void);
    void (*cupti_ready)(void);
} d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, -1, 13000, 1, 0, NULL, NULL};

static void read_scenario(void) {
    const char *p = getenv("FAKE_CUPTI_SCENARIO");
    FILE *f = p && *p ? fopen(p, "r") : NULL;
    if (!f) return;
    char line[4096], key[64];
    long v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%63s %li", key, &v) != 2) continue;
        if (strcmp(key, "cuda_driver_version") == 0) d.driver_version = (int)v;
        else if (strcmp(key, "cuda_device_count") == 0) d.device_count = (int)v;
        else if (strcmp(key, "cuda_init_error") == 0) d.init_error = (int)v;
    }
    fclose(f);
}
static pthread_once_t scen_once = PTHREAD_ONCE_INIT;

static void verbose(const char *fmt, const char *a, const char *b) {
    const char *v = getenv("FAKE_CUDA_VERBOSE");
    if (v && *v && strcmp(v, "0") != 0) fprintf(stderr, fmt, a, b);
}

static int run_injection(void) {
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path || !*path || strcmp(path, "none") == 0) return -1;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        verbose("fake_cuda: dlopen(%s) failed: %s\n", path, dlerror());
        return -2;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    if (!init) {
        verbose("fake_cuda: %s has no InitializeInjection%s\n", path, "");
        return -3;
    }
    return init(); /* the library stays loaded for the life of the process */
}

EXPORT CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&scen_once, read_scenario);
    if (d.init_error) return d.init_error;
    pthread_mutex_lock(&d.mu);
    if (d.state == 2) {
        pthread_mutex_unlock(&d.mu);
        return CUDA_SUCCESS;
    }
    if (d.state == 1) {
        /* Re-entered from the injection on the initialising thread: the
         * driver is usable already. Other threads wait for the injection. */
        if (pthread_equal(d.init_thread, pthread_self())) {
            pthread_mutex_unlock(&d.mu);
            return CUDA_SUCCESS;
        }
        while (d.state != 2) pthread_cond_wait(&d.cv, &d.mu);
        pthread_mutex_unlock(&d.mu);
        return CUDA_SUCCESS;
    }
    d.state = 1;
    d.init_thread = pthread_self();
    pthread_mutex_unlock(&d.mu);

    int r = run_injection(); /* on the calling thread, before cuInit returns */

    pthread_mutex_lock(&d.mu);
    d.injection_result = r;
    d.state = 2;
    void (*ready)(void) = d.cupti_ready;
    pthread_cond_broadcast(&d.cv);
    pthread_mutex_unlock(&d.mu);
    /* Driver init is over: only now could the application launch work, so
     * only now may the fake CUPTI start playing its scenario. */
    if (ready) ready();
    return CUDA_SUCCESS;
}

static int initialised(void) {
    pthread_mutex_lock(&d.mu);
    int s = d.state;
    pthread_mutex_unlock(&d.mu);
    return s != 0;
}

EXPORT CUresult cuDriverGetVersion(int *version) { /* allowed before cuInit */
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&scen_once, read_scenario);
    *version = d.driver_version;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    if (!initialised()) return CUDA_ERROR_NOT_INITIALIZED;
    *count = d.device_count;
    return CUDA_SUCCESS;
}

static CUresult check_dev(CUdevice dev) {
    if (!initialised()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= d.device_count) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(ordinal);
    if (r) return r;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(dev);
    if (r) return r;
    snprintf(name, (size_t)len, "%s", FAKE_GPU_NAME);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    static const unsigned char base[16] = FAKE_GPU_UUID_INIT;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(dev);
    if (r) return r;
    memcpy(uuid->bytes, base, 16);
    uuid->bytes[15] = (char)(base[15] ^ (unsigned char)dev);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    return cuDeviceGetUuid(uuid, dev);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(dev);
    if (r) return r;
    *bytes = (size_t)FAKE_GPU_TOTAL_MEM;
    return CUDA_SUCCESS;
}

/* Known attributes get fake_gpu.h values; any other attribute in the
 * driver's range answers 0 (the real driver knows ~150 of them). */
EXPORT CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev) {
    if (!pi || attrib <= 0 || attrib >= 1000) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(dev);
    if (r) return r;
    switch (attrib) {
    case ATTR_MULTIPROCESSOR_COUNT: *pi = FAKE_GPU_SM_COUNT; break;
    case ATTR_COMPUTE_CAPABILITY_MAJOR: *pi = FAKE_GPU_CC_MAJOR; break;
    case ATTR_COMPUTE_CAPABILITY_MINOR: *pi = FAKE_GPU_CC_MINOR; break;
    case ATTR_PCI_BUS_ID: *pi = FAKE_GPU_PCI_BUS + dev; break;
    case ATTR_PCI_DEVICE_ID: *pi = FAKE_GPU_PCI_DEVICE; break;
    case ATTR_PCI_DOMAIN_ID: *pi = FAKE_GPU_PCI_DOMAIN; break;
    default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

static const struct {
    int code;
    const char *name, *text;
} ERRS[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult err_lookup(CUresult e, const char **s, int name) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof ERRS / sizeof ERRS[0]; i++)
        if (ERRS[i].code == e) {
            *s = name ? ERRS[i].name : ERRS[i].text;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuGetErrorString(CUresult e, const char **s) { return err_lookup(e, s, 0); }
EXPORT CUresult cuGetErrorName(CUresult e, const char **s) { return err_lookup(e, s, 1); }

/* ---- test hooks ---- */

EXPORT int fakecuda_injection_result(void) {
    pthread_mutex_lock(&d.mu);
    int r = d.injection_result;
    pthread_mutex_unlock(&d.mu);
    return r;
}

/* Called by fake_cupti on its first call. `ready` runs once cuInit has
 * finished (at once if it already has); `scenario_done` feeds fakecuda_work. */
EXPORT void fakecuda__register_cupti(int (*scenario_done)(void), void (*ready)(void)) {
    __atomic_store_n(&d.cupti_done, scenario_done, __ATOMIC_RELEASE);
    pthread_mutex_lock(&d.mu);
    int now = d.state == 2;
    if (!now) d.cupti_ready = ready;
    pthread_mutex_unlock(&d.mu);
    if (now) ready();
}

EXPORT void fakecuda_work(unsigned ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int (*done)(void) = __atomic_load_n(&d.cupti_done, __ATOMIC_ACQUIRE);
        if (done && done()) return;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long long el = (t.tv_sec - t0.tv_sec) * 1000LL + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (el >= (long long)ms) return;
        struct timespec s = {0, 1000000}; /* 1 ms */
        while (nanosleep(&s, &s) && errno == EINTR) {}
    }
}
