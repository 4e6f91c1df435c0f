/*
 * Input to bindgen for cupti-sys (see build.rs and generate.sh).
 *
 * Only the headers a CUPTI activity/callback agent needs. cupti_activity.h
 * includes cupti_activity_deprecated.h, which keeps the older record structs
 * (Kernel9, Memcpy5, Memset4, ...) that 12.x libraries still produce.
 *
 * PM sampling (CUPTI 12.6+): cupti_pmsampling.h, the profiler host API that
 * builds its config image and evaluates its counter data, and from
 * cupti_target.h / cupti_profiler_target.h the chip name and profiler
 * initialization it needs. The 12.x cupti_profiler_host.h includes the C++
 * <string>; generate.sh puts an empty stand-in on the include path.
 */
#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_callbacks.h>
#include <cupti_activity.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <cupti_target.h>
#include <cupti_profiler_target.h>
#include <cupti_profiler_host.h>
#include <cupti_pmsampling.h>
