/* Plays the CUDA driver's part in injection without any driver:
 *   inject AGENT [PRELOAD_LIB]  -> exit code 42
 * Optionally loads PRELOAD_LIB first (RTLD_GLOBAL, e.g. a stub libcuda.so.1),
 * then dlopens AGENT and calls its InitializeInjection, as cuInit would.
 * The exit code proves the job's own code survives whatever the agent does. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    if (argc > 2 && !dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "inject: %s\n", dlerror());
        return 3;
    }
    void *agent = dlopen(argv[1], RTLD_NOW);
    if (!agent) {
        fprintf(stderr, "inject: %s\n", dlerror());
        return 4;
    }
    int (*init)(void) = (int (*)(void))dlsym(agent, "InitializeInjection");
    if (!init) return 5;
    printf("InitializeInjection returned %d\n", init());
    return 42;
}
