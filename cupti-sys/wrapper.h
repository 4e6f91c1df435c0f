/*
 * Input to bindgen for cupti-sys (see build.rs and generate.sh).
 *
 * Only the headers a CUPTI activity/callback agent needs. cupti_activity.h
 * includes cupti_activity_deprecated.h, which keeps the older record structs
 * (Kernel9, Memcpy5, Memset4, ...) that 12.x libraries still produce.
 */
#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_callbacks.h>
#include <cupti_activity.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
