/* nvtxprog: an NVTX-instrumented "job" built against the vendored NVTX v3
 * headers (tests/doubles/nvtx3). NVTX loads NVTX_INJECTION64_PATH (the agent
 * under `gputrace run`) at the first call.
 *
 *   nvtxprog [--cuda MS] [--flood N] [--storm] [--steps N MS SLOW] CODE
 *
 * Always: the scenario below (tests/nvtx.rs checks its markers exactly).
 * --cuda MS: inside the range "cuda-work", dlopen libcuda.so.1, cuInit(0),
 *            fakecuda_work(MS) (the fake CUPTI's API records fall inside).
 * --flood N: N marks "flood" as fast as possible (queue overflow test).
 * --storm:   8 threads mark in a loop while main returns (exit race).
 * --steps N MS SLOW: after the CUDA work, N step marks (gputrace_mark
 *            "gputrace" "step") MS ms apart, except that the one before the
 *            last six comes SLOW ms after the previous one.
 * Exit status CODE (return from main). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *ender(void *arg) {
    nvtxRangeEnd(*(nvtxRangeId_t *)arg);
    return NULL;
}

static void *worker(void *arg) {
    char name[32];
    snprintf(name, sizeof name, "worker-%ld", (long)arg);
    nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), name);
    for (int i = 0; i < 100; i++) {
        nvtxRangePushA("t-work");
        nvtxRangePop();
    }
    return NULL;
}

static void *stormer(void *arg) {
    (void)arg;
    for (;;) nvtxMarkA("storm");
    return NULL;
}

static nvtxEventAttributes_t attrs(void) {
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    return a;
}

int main(int argc, char **argv) {
    int cuda_ms = -1, storm = 0, steps = 0, step_ms = 0, slow_ms = 0;
    long flood = 0;
    int i = 1;
    for (; i < argc - 1; i++) {
        if (!strcmp(argv[i], "--cuda")) cuda_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--flood")) flood = atol(argv[++i]);
        else if (!strcmp(argv[i], "--storm")) storm = 1;
        else if (!strcmp(argv[i], "--steps") && i + 3 < argc - 1) {
            steps = atoi(argv[++i]);
            step_ms = atoi(argv[++i]);
            slow_ms = atoi(argv[++i]);
        }
    }
    int code = i < argc ? atoi(argv[i]) : 0;

    nvtxMarkA("start");
    if (nvtxRangePushA("outer") != 0) return 90;
    if (nvtxRangePushA("inner") != 1) return 91;
    nvtxMarkW(L"wide \u00fc");
    if (nvtxRangePop() != 1) return 92;
    if (nvtxRangePop() != 0) return 93;
    if (nvtxRangePop() >= 0) return 94; /* nothing open: counted */

    nvtxDomainHandle_t io = nvtxDomainCreateA("io");
    nvtxDomainHandle_t net = nvtxDomainCreateW(L"net");
    nvtxDomainNameCategoryA(io, 7, "disk");
    nvtxNameCategoryA(3, "default-cat");
    nvtxStringHandle_t reg = nvtxDomainRegisterStringA(io, "registered-read");
    nvtxEventAttributes_t a = attrs();
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = reg;
    a.category = 7;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = 0xff00ff00;
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = 42;
    if (nvtxDomainRangePushEx(io, &a) != 0) return 95;
    nvtxDomainRangePop(io);
    a = attrs();
    a.messageType = NVTX_MESSAGE_TYPE_UNICODE;
    a.message.unicode = L"net-wide";
    a.payloadType = NVTX_PAYLOAD_TYPE_DOUBLE;
    a.payload.dValue = 2.5;
    nvtxDomainMarkEx(net, &a);
    a = attrs();
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "cat-mark";
    a.category = 3;
    a.payloadType = NVTX_PAYLOAD_TYPE_INT32;
    a.payload.iValue = -5;
    nvtxMarkEx(&a);

    nvtxRangeId_t id = nvtxRangeStartA("cross-thread");
    if (id == 0) return 96;
    pthread_t t;
    pthread_create(&t, NULL, ender, &id);
    pthread_join(t, NULL);

    char longmsg[301];
    memset(longmsg, 'x', 300);
    longmsg[300] = 0;
    nvtxMarkA(longmsg);

    const char *lib = getenv("GPUTRACE_AGENT_LIB");
    void *h = lib ? dlopen(lib, RTLD_NOW) : NULL;
    int (*mark)(const char *, const char *) = h ? (int (*)(const char *, const char *))dlsym(h, "gputrace_mark") : NULL;
    if (!mark) return 97;
    if (mark("gputrace", "step tokens=4096 samples=8") != 1) return 98;
    if (mark(NULL, "plain") != 1) return 99;

    pthread_t w[8];
    for (long k = 0; k < 8; k++) pthread_create(&w[k], NULL, worker, (void *)k);
    for (int k = 0; k < 8; k++) pthread_join(w[k], NULL);

    if (cuda_ms >= 0) {
        nvtxRangePushA("cuda-work");
        void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!cu) return 80;
        int (*cuInit)(unsigned) = (int (*)(unsigned))dlsym(cu, "cuInit");
        void (*work)(unsigned) = (void (*)(unsigned))dlsym(cu, "fakecuda_work");
        if (!cuInit || !work || cuInit(0) != 0) return 81;
        work(cuda_ms);
        nvtxRangePop();
    }
    for (int k = 0; k < steps; k++) {
        usleep((useconds_t)(k == steps - 7 ? slow_ms : step_ms) * 1000);
        if (mark("gputrace", "step") != 1) return 89;
    }
    for (long k = 0; k < flood; k++) nvtxMarkA("flood");

    nvtxRangePushA("never-popped");
    if (storm) {
        for (int k = 0; k < 8; k++) pthread_create(&w[k], NULL, stormer, NULL);
        usleep(20000);
    }
    return code;
}
