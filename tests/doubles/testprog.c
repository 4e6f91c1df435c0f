/* testprog.c -- the "training job" for GPU-free tests, linked against the
 * fake libcuda.so.1 (rpath = its build directory).
 *
 * usage: testprog [-v] [--ms N] [ACTION [ARGS...]]
 *   cuInit(0), then fakecuda_work(N) (default 2000 ms; returns early when the
 *   fake CUPTI scenario is done), then ACTION:
 *     (none) | exit CODE   return from main (atexit handlers run)
 *     os_exit CODE         _exit(CODE): no atexit, no destructors
 *     abort                abort()
 *     sigterm-self         kill(getpid(), SIGTERM) with default disposition
 *     fork-no-exec         fork; the child sleeps 50 ms and _exit(0)s, the
 *                          parent waits for it and exits 0 (97 if the child
 *                          did not exit 0, e.g. aborted by fake_cupti because
 *                          something called CUPTI in it)
 *     fork-exec PROG ARGS  fork; the child execvp()s PROG; the parent waits
 *                          and exits 0 (98 if the child did not exit 0)
 *     exec PROG ARGS       execvp() in this process (no atexit handlers)
 *     nccl N               play NCCL 2.28 (profiler interface v5) for N
 *                          ungrouped AllReduce collectives against the
 *                          plugin named by $NCCL_PROFILER_PLUGIN (see
 *                          play_nccl), then fakecuda_work(60000) so the fake
 *                          CUPTI can play the kernels those launches ran,
 *                          then return 0 (atexit handlers run). Exit 3: no
 *                          $NCCL_PROFILER_PLUGIN, dlopen or dlsym failed;
 *                          4: a plugin call returned non-zero (message).
 *   -v prints cuInit's result and fakecuda_injection_result() on stderr.
 * Prints nothing else. Exit 2 on a usage error.
 *
 * ORDER with `nccl N`: the scenario's `nccl_kernels N` step blocks the fake
 * CUPTI worker until the plugin pushes its external correlation ids, so the
 * scenario is not "done" before the collectives are played and the first
 * fakecuda_work(--ms) sleeps its full time: run `testprog --ms 0 nccl N` (or
 * a small --ms; steps before nccl_kernels may still be playing meanwhile,
 * that is fine). The second fakecuda_work, after the collectives, returns as
 * soon as the scenario is done (nccl_kernels has emitted all N kernels).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int cuInit(unsigned int flags);
int fakecuda_injection_result(void);
void fakecuda_work(unsigned ms);

static int usage(void) {
    fprintf(stderr, "usage: testprog [-v] [--ms N] [exit CODE|os_exit CODE|abort|"
                    "sigterm-self|fork-no-exec|fork-exec PROG ARGS|exec PROG ARGS|nccl N]\n");
    return 2;
}

/* ------------------------------------------------------------------------ */
/* NCCL profiler plugin interface v5 (NCCL 2.28, profiler_v5.h), x86-64.     */

enum {
    NCCL_PROFILE_COLL = 1 << 1,
    NCCL_PROFILE_GROUP_API = 1 << 8,
    NCCL_PROFILE_COLL_API = 1 << 9,
    NCCL_PROFILE_KERNEL_LAUNCH = 1 << 11,
};

typedef struct {
    uint64_t type;   /* @0: ncclProfile* bit */
    void *parentObj; /* @8 */
    int rank;        /* @16 */
    union {          /* @24 */
        struct {
            bool graphCaptured;
            int groupDepth;
        } groupApi;
        struct {
            const char *func;
            size_t count;
            const char *datatype;
            int root;
            void *stream;
            bool graphCaptured;
        } collApi;
        struct {
            void *stream;
        } kernelLaunch;
        struct {
            uint64_t seqNumber;
            const char *func;
            const void *sendBuff;
            void *recvBuff;
            size_t count;
            int root;
            const char *datatype;
            uint8_t nChannels;
            uint8_t nWarps;
            const char *algo;
            const char *proto;
            void *parentGroup;
        } coll;
    };
} nccl_descr_v5;

typedef struct {
    const char *name;
    int (*init)(void **ctx, uint64_t commId, int *eActivationMask, const char *commName,
                int nNodes, int nranks, int rank, void *logfn);
    int (*startEvent)(void *ctx, void **eHandle, nccl_descr_v5 *eDescr);
    int (*stopEvent)(void *eHandle);
    int (*recordEventState)(void *eHandle, int eState, void *eStateArgs);
    int (*finalize)(void *ctx);
} nccl_profiler_v5;

#define OFF(t, f) offsetof(nccl_descr_v5, t.f)
_Static_assert(sizeof(nccl_descr_v5) == 112, "ncclProfilerEventDescr_v5_t size");
_Static_assert(offsetof(nccl_descr_v5, parentObj) == 8 && offsetof(nccl_descr_v5, rank) == 16,
               "descr header");
_Static_assert(OFF(groupApi, graphCaptured) == 24 && OFF(groupApi, groupDepth) == 28, "groupApi");
_Static_assert(OFF(collApi, func) == 24 && OFF(collApi, count) == 32 && OFF(collApi, datatype) == 40 &&
                   OFF(collApi, root) == 48 && OFF(collApi, stream) == 56 &&
                   OFF(collApi, graphCaptured) == 64,
               "collApi");
_Static_assert(OFF(kernelLaunch, stream) == 24, "kernelLaunch");
_Static_assert(OFF(coll, seqNumber) == 24 && OFF(coll, func) == 32 && OFF(coll, sendBuff) == 40 &&
                   OFF(coll, recvBuff) == 48 && OFF(coll, count) == 56 && OFF(coll, root) == 64 &&
                   OFF(coll, datatype) == 72 && OFF(coll, nChannels) == 80 &&
                   OFF(coll, nWarps) == 81 && OFF(coll, algo) == 88 && OFF(coll, proto) == 96 &&
                   OFF(coll, parentGroup) == 104,
               "coll");
_Static_assert(sizeof(nccl_profiler_v5) == 48, "ncclProfiler_v5_t size");
#undef OFF

#define NCCL_CALL(what, call)                                                  \
    do {                                                                       \
        int _r = (call);                                                       \
        if (_r != 0) {                                                         \
            fprintf(stderr, "testprog: nccl: %s returned %d\n", what, _r);      \
            return 4;                                                          \
        }                                                                      \
    } while (0)

/* What NCCL 2.28 does for N ungrouped ncclAllReduce calls (bf16, 1024
 * elements) on one communicator, single-threaded: per call, the implicit
 * group brackets the API event and the kernel launch; the collective's task
 * event starts after the group ends (its parent is the CollApi event, whose
 * parent is the group). */
static int play_nccl(unsigned n) {
    const char *path = getenv("NCCL_PROFILER_PLUGIN");
    if (!path || !*path) {
        fprintf(stderr, "testprog: nccl: NCCL_PROFILER_PLUGIN is not set\n");
        return 3;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "testprog: nccl: dlopen %s: %s\n", path, dlerror());
        return 3;
    }
    const nccl_profiler_v5 *p = (const nccl_profiler_v5 *)dlsym(lib, "ncclProfiler_v5");
    if (!p || !p->init || !p->startEvent || !p->stopEvent || !p->finalize) {
        fprintf(stderr, "testprog: nccl: %s has no usable ncclProfiler_v5\n", path);
        return 3;
    }
    void *ctx = NULL;
    int mask = 0;
    NCCL_CALL("init", p->init(&ctx, 0xC0FFEEull, &mask, "dp", 1, 2, 0, NULL));
    static int stream_storage; /* an opaque cudaStream_t */
    void *stream = &stream_storage;
    for (unsigned i = 0; i < n; i++) {
        void *group = NULL, *api = NULL, *launch = NULL, *coll = NULL;
        nccl_descr_v5 d;
        memset(&d, 0, sizeof d);
        d.type = NCCL_PROFILE_GROUP_API;
        d.rank = 0;
        d.groupApi.graphCaptured = false;
        d.groupApi.groupDepth = 1;
        NCCL_CALL("startEvent(GroupApi)", p->startEvent(ctx, &group, &d));

        memset(&d, 0, sizeof d);
        d.type = NCCL_PROFILE_COLL_API;
        d.parentObj = group;
        d.rank = 0;
        d.collApi.func = "AllReduce";
        d.collApi.count = 1024;
        d.collApi.datatype = "ncclBfloat16";
        d.collApi.root = 0;
        d.collApi.stream = stream;
        NCCL_CALL("startEvent(CollApi)", p->startEvent(ctx, &api, &d));

        memset(&d, 0, sizeof d);
        d.type = NCCL_PROFILE_KERNEL_LAUNCH;
        d.parentObj = group;
        d.rank = 0;
        d.kernelLaunch.stream = stream;
        NCCL_CALL("startEvent(KernelLaunch)", p->startEvent(ctx, &launch, &d));
        /* (cuLaunchKernelEx would run here) */
        NCCL_CALL("stopEvent(KernelLaunch)", p->stopEvent(launch));
        NCCL_CALL("stopEvent(CollApi)", p->stopEvent(api));
        NCCL_CALL("stopEvent(GroupApi)", p->stopEvent(group));

        memset(&d, 0, sizeof d);
        d.type = NCCL_PROFILE_COLL;
        d.parentObj = api;
        d.rank = 0;
        d.coll.seqNumber = i;
        d.coll.func = "AllReduce";
        d.coll.count = 1024;
        d.coll.root = 0;
        d.coll.datatype = "ncclBfloat16";
        d.coll.nChannels = 2;
        d.coll.nWarps = 16;
        d.coll.algo = "RING";
        d.coll.proto = "LL";
        d.coll.parentGroup = group;
        NCCL_CALL("startEvent(Coll)", p->startEvent(ctx, &coll, &d));
        NCCL_CALL("stopEvent(Coll)", p->stopEvent(coll));
    }
    NCCL_CALL("finalize", p->finalize(ctx));
    /* NCCL keeps its plugin loaded until exit; so do we (no dlclose). */
    return 0;
}

int main(int argc, char **argv) {
    int verbose = 0, i = 1;
    unsigned ms = 2000;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) verbose = 1;
        else if (strcmp(argv[i], "--ms") == 0 && i + 1 < argc) ms = (unsigned)atoi(argv[++i]);
        else break;
    }
    int r = cuInit(0);
    if (verbose)
        fprintf(stderr, "testprog: cuInit=%d injection=%d\n", r, fakecuda_injection_result());
    fakecuda_work(ms);
    if (i >= argc) return 0;
    const char *a = argv[i];
    if (strcmp(a, "exit") == 0 && i + 1 < argc) return atoi(argv[i + 1]);
    if (strcmp(a, "os_exit") == 0 && i + 1 < argc) _exit(atoi(argv[i + 1]));
    if (strcmp(a, "abort") == 0) abort();
    if (strcmp(a, "sigterm-self") == 0) {
        signal(SIGTERM, SIG_DFL);
        kill(getpid(), SIGTERM);
        for (;;) pause();
    }
    if (strcmp(a, "fork-no-exec") == 0 || strcmp(a, "fork-exec") == 0) {
        int exec = a[5] == 'e';
        if (exec && i + 1 >= argc) return usage();
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) return 99;
        if (pid == 0) {
            if (exec) {
                execvp(argv[i + 1], argv + i + 1);
                _exit(127);
            }
            usleep(50000);
            _exit(0);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0) {}
        if (verbose) fprintf(stderr, "testprog: child status 0x%x\n", st);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return exec ? 98 : 97;
        return 0;
    }
    if (strcmp(a, "nccl") == 0 && i + 1 < argc) {
        int rc = play_nccl((unsigned)atoi(argv[i + 1]));
        if (rc) return rc;
        fakecuda_work(60000); /* until the fake CUPTI has played the kernels */
        return 0;
    }
    if (strcmp(a, "exec") == 0 && i + 1 < argc) {
        fflush(NULL);
        execvp(argv[i + 1], argv + i + 1);
        return 127;
    }
    return usage();
}
