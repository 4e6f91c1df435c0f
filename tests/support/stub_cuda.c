/* A libcuda.so.1 with no GPU behind it: enough for libcupti to find "a
 * driver" that does nothing. Used with the real libcupti from the wheels. */
int cuInit(unsigned flags) { (void)flags; return 100; /* CUDA_ERROR_NO_DEVICE */ }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 0; return 100; }
