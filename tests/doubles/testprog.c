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
 *   -v prints cuInit's result and fakecuda_injection_result() on stderr.
 * Prints nothing else. Exit 2 on a usage error.
 */
#define _GNU_SOURCE
#include <signal.h>
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
                    "sigterm-self|fork-no-exec|fork-exec PROG ARGS|exec PROG ARGS]\n");
    return 2;
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
    if (strcmp(a, "exec") == 0 && i + 1 < argc) {
        fflush(NULL);
        execvp(argv[i + 1], argv + i + 1);
        return 127;
    }
    return usage();
}
