//! NVML, loaded at run time: the few functions the sampler calls.
//!
//! The types and values are declared by hand from `nvml.h` (NVML 13.5, in
//! the `nvidia-nvml-dev` 13.5.37 wheel on PyPI: `pip download --no-deps
//! nvidia-nvml-dev`); every one used here is unchanged since NVML 11
//! (`nvmlDeviceGetCurrentClocksEventReasons` is 12.x's new name of
//! `nvmlDeviceGetCurrentClocksThrottleReasons`, which older drivers have
//! instead: both are looked up). The NVLink field values, ECC counts and
//! event calls are as in NVML 13's `nvml.h` (`nvmlFieldValue_t` and
//! `nvmlEventData_t` with the layouts pinned by the tests below, unchanged
//! since NVML 11; `nvmlEventSetWait_v2` since NVML 11.0). Nothing is linked: a machine without the
//! NVIDIA driver has no `libnvidia-ml.so.1`, and the agent then samples
//! nothing.

use crate::dl::{required_symbol, typed_symbol, Lib, MissingSymbol};
use crate::error::CallError;
use std::ffi::{c_char, c_int, c_longlong, c_uint, c_ulong, c_ulonglong, c_ushort, c_void, CStr};

/// `nvmlReturn_t` (a C enum: `int`-sized).
pub type NvmlReturn = c_uint;
/// `nvmlDevice_t` (`struct nvmlDevice_st *`).
pub type Device = *mut c_void;

/// `NVML_SUCCESS`.
pub const SUCCESS: NvmlReturn = 0;
/// `NVML_ERROR_NOT_SUPPORTED`.
pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
/// `NVML_ERROR_NOT_FOUND`.
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
/// `NVML_ERROR_TIMEOUT`: `nvmlEventSetWait_v2` had no event to deliver.
pub const ERROR_TIMEOUT: NvmlReturn = 10;
/// `NVML_ERROR_FUNCTION_NOT_FOUND`: also what the agent reports for a
/// symbol this libnvidia-ml does not have.
pub const ERROR_FUNCTION_NOT_FOUND: NvmlReturn = 13;
/// `NVML_ERROR_GPU_IS_LOST`: the GPU fell off the bus.
pub const ERROR_GPU_IS_LOST: NvmlReturn = 15;

/// `NVML_CLOCK_SM` (`nvmlClockType_t`).
pub const CLOCK_SM: c_uint = 1;
/// `NVML_CLOCK_MEM`.
pub const CLOCK_MEM: c_uint = 2;
/// `NVML_TEMPERATURE_GPU` (`nvmlTemperatureSensors_t`).
pub const TEMPERATURE_GPU: c_uint = 0;
/// `NVML_PCIE_UTIL_TX_BYTES` (`nvmlPcieUtilCounter_t`).
pub const PCIE_UTIL_TX_BYTES: c_uint = 0;
/// `NVML_PCIE_UTIL_RX_BYTES`.
pub const PCIE_UTIL_RX_BYTES: c_uint = 1;

/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`: NVLink data sent, KiB (a
/// cumulative counter).
pub const FI_DEV_NVLINK_THROUGHPUT_DATA_TX: c_uint = 138;
/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`: NVLink data received, KiB.
pub const FI_DEV_NVLINK_THROUGHPUT_DATA_RX: c_uint = 139;
/// The `scopeId` of an NVLink throughput field for the sum over all links
/// (nvml.h: "A scopeId of UINT_MAX returns aggregate value summed up across
/// all links").
pub const SCOPE_ALL_LINKS: c_uint = c_uint::MAX;
/// `NVML_MEMORY_ERROR_TYPE_CORRECTED` (`nvmlMemoryErrorType_t`).
pub const MEMORY_ERROR_TYPE_CORRECTED: c_uint = 0;
/// `NVML_MEMORY_ERROR_TYPE_UNCORRECTED`.
pub const MEMORY_ERROR_TYPE_UNCORRECTED: c_uint = 1;
/// `NVML_VOLATILE_ECC` (`nvmlEccCounterType_t`): counts since the driver loaded.
pub const VOLATILE_ECC: c_uint = 0;
/// `nvmlEventTypeXidCriticalError`.
pub const EVENT_TYPE_XID_CRITICAL_ERROR: c_ulonglong = 0x8;

/// `nvmlValueType_t` values: which member of [`Value`] is set.
pub mod value_type {
    use std::ffi::c_uint;
    /// `NVML_VALUE_TYPE_DOUBLE`.
    pub const DOUBLE: c_uint = 0;
    /// `NVML_VALUE_TYPE_UNSIGNED_INT`.
    pub const UNSIGNED_INT: c_uint = 1;
    /// `NVML_VALUE_TYPE_UNSIGNED_LONG`.
    pub const UNSIGNED_LONG: c_uint = 2;
    /// `NVML_VALUE_TYPE_UNSIGNED_LONG_LONG`.
    pub const UNSIGNED_LONG_LONG: c_uint = 3;
    /// `NVML_VALUE_TYPE_SIGNED_LONG_LONG`.
    pub const SIGNED_LONG_LONG: c_uint = 4;
    /// `NVML_VALUE_TYPE_SIGNED_INT`.
    pub const SIGNED_INT: c_uint = 5;
    /// `NVML_VALUE_TYPE_UNSIGNED_SHORT`.
    pub const UNSIGNED_SHORT: c_uint = 6;
}

/// `nvmlValue_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union Value {
    /// `dVal`.
    pub d: f64,
    /// `siVal`.
    pub si: c_int,
    /// `uiVal`.
    pub ui: c_uint,
    /// `ulVal`.
    pub ul: c_ulong,
    /// `ullVal`.
    pub ull: c_ulonglong,
    /// `sllVal`.
    pub sll: c_longlong,
    /// `usVal`.
    pub us: c_ushort,
}

/// `nvmlFieldValue_t`: one field of `nvmlDeviceGetFieldValues`, asked for
/// by `field_id` and `scope_id`, answered in the rest.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FieldValue {
    /// `fieldId` (`NVML_FI_*`).
    pub field_id: c_uint,
    /// `scopeId`: for NVLink fields the link, or [`SCOPE_ALL_LINKS`].
    pub scope_id: c_uint,
    /// `timestamp`: CPU time of the value, µs since 1970.
    pub timestamp: c_longlong,
    /// `latencyUsec`.
    pub latency_usec: c_longlong,
    /// `valueType` (see [`value_type`]).
    pub value_type: c_uint,
    /// `nvmlReturn`: this field's own result; `value` is undefined unless
    /// it is `NVML_SUCCESS`.
    pub nvml_return: NvmlReturn,
    /// `value`.
    pub value: Value,
}

impl FieldValue {
    /// The request for `field` at `scope`.
    pub fn ask(field: c_uint, scope: c_uint) -> FieldValue {
        FieldValue {
            field_id: field,
            scope_id: scope,
            timestamp: 0,
            latency_usec: 0,
            value_type: value_type::UNSIGNED_LONG_LONG,
            nvml_return: SUCCESS,
            value: Value { ull: 0 },
        }
    }

    /// The value as an unsigned integer (negative values read 0, a double
    /// is truncated); `None` for a value type this code does not know.
    pub fn as_u64(&self) -> Option<u64> {
        // Safety: `value_type` says which member NVML wrote; every member
        // is plain data, so reading the one it names is defined.
        unsafe {
            Some(match self.value_type {
                value_type::DOUBLE => self.value.d.max(0.0) as u64,
                value_type::UNSIGNED_INT => self.value.ui as u64,
                value_type::UNSIGNED_LONG => self.value.ul,
                value_type::UNSIGNED_LONG_LONG => self.value.ull,
                value_type::SIGNED_LONG_LONG => self.value.sll.max(0) as u64,
                value_type::SIGNED_INT => self.value.si.max(0) as u64,
                value_type::UNSIGNED_SHORT => self.value.us as u64,
                _ => return None,
            })
        }
    }
}

/// `nvmlEventSet_t` (`struct nvmlEventSet_st *`).
pub type EventSet = *mut c_void;

/// `nvmlEventData_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventData {
    /// `device`: where the event happened.
    pub device: Device,
    /// `eventType` (one `nvmlEventType*` bit).
    pub event_type: c_ulonglong,
    /// `eventData`: the XID of an XID event (999 for one NVML does not know).
    pub event_data: c_ulonglong,
    /// `gpuInstanceId` (MIG), `0xFFFFFFFF` when not attributable.
    pub gpu_instance_id: c_uint,
    /// `computeInstanceId` (MIG), as above.
    pub compute_instance_id: c_uint,
}

impl Default for EventData {
    fn default() -> EventData {
        EventData {
            device: std::ptr::null_mut(),
            event_type: 0,
            event_data: 0,
            gpu_instance_id: 0,
            compute_instance_id: 0,
        }
    }
}

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Utilization {
    /// Percent of the sample period a kernel was executing.
    pub gpu: c_uint,
    /// Percent of the sample period device memory was read or written.
    pub memory: c_uint,
}

/// `nvmlMemory_t` (v1).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Memory {
    /// Bytes in all.
    pub total: c_ulonglong,
    /// Bytes free.
    pub free: c_ulonglong,
    /// Bytes reserved or allocated.
    pub used: c_ulonglong,
}

type InitFn = unsafe extern "C" fn() -> NvmlReturn;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> NvmlReturn;
type ByIndexFn = unsafe extern "C" fn(c_uint, *mut Device) -> NvmlReturn;
type ByUuidFn = unsafe extern "C" fn(*const c_char, *mut Device) -> NvmlReturn;
type UtilFn = unsafe extern "C" fn(Device, *mut Utilization) -> NvmlReturn;
type ClockFn = unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> NvmlReturn;
type UintFn = unsafe extern "C" fn(Device, *mut c_uint) -> NvmlReturn;
type U64Fn = unsafe extern "C" fn(Device, *mut c_ulonglong) -> NvmlReturn;
type MemFn = unsafe extern "C" fn(Device, *mut Memory) -> NvmlReturn;
type ErrorStringFn = unsafe extern "C" fn(NvmlReturn) -> *const c_char;
type FieldValuesFn = unsafe extern "C" fn(Device, c_int, *mut FieldValue) -> NvmlReturn;
type EccFn = unsafe extern "C" fn(Device, c_uint, c_uint, *mut c_ulonglong) -> NvmlReturn;
type EventSetCreateFn = unsafe extern "C" fn(*mut EventSet) -> NvmlReturn;
type RegisterEventsFn = unsafe extern "C" fn(Device, c_ulonglong, EventSet) -> NvmlReturn;
type EventSetWaitFn = unsafe extern "C" fn(EventSet, *mut EventData, c_uint) -> NvmlReturn;
type EventSetFreeFn = unsafe extern "C" fn(EventSet) -> NvmlReturn;

/// The resolved functions. Optional ones are `None` when this libnvidia-ml
/// lacks them; the series they feed then report `FUNCTION_NOT_FOUND`.
pub struct Nvml {
    init: InitFn,
    count: CountFn,
    by_index: ByIndexFn,
    by_uuid: Option<ByUuidFn>,
    utilization: Option<UtilFn>,
    clock: Option<ClockFn>,
    max_clock: Option<ClockFn>,
    power: Option<UintFn>,
    energy: Option<U64Fn>,
    temperature: Option<ClockFn>,
    reasons: Option<(U64Fn, &'static str)>,
    memory: Option<MemFn>,
    pcie: Option<ClockFn>,
    field_values: Option<FieldValuesFn>,
    ecc: Option<EccFn>,
    event_set_create: Option<EventSetCreateFn>,
    register_events: Option<RegisterEventsFn>,
    event_set_wait: Option<EventSetWaitFn>,
    event_set_free: Option<EventSetFreeFn>,
    error_string: Option<ErrorStringFn>,
}

// Safety: NVML's functions are thread-safe (nvml.h: "NVML is thread-safe");
// the struct holds only function pointers.
unsafe impl Send for Nvml {}
// Safety: as above.
unsafe impl Sync for Nvml {}

impl Nvml {
    /// Look the functions up; `Err` names the first required one missing.
    pub fn resolve(lib: &Lib) -> Result<Nvml, MissingSymbol> {
        let reasons = typed_symbol!(lib, "nvmlDeviceGetCurrentClocksEventReasons", U64Fn)
            .map(|f| (f, "nvmlDeviceGetCurrentClocksEventReasons"))
            .or_else(|| {
                typed_symbol!(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", U64Fn)
                    .map(|f| (f, "nvmlDeviceGetCurrentClocksThrottleReasons"))
            });
        Ok(Nvml {
            init: required_symbol!(lib, "nvmlInit_v2", InitFn),
            count: required_symbol!(lib, "nvmlDeviceGetCount_v2", CountFn),
            by_index: required_symbol!(lib, "nvmlDeviceGetHandleByIndex_v2", ByIndexFn),
            by_uuid: typed_symbol!(lib, "nvmlDeviceGetHandleByUUID", ByUuidFn),
            utilization: typed_symbol!(lib, "nvmlDeviceGetUtilizationRates", UtilFn),
            clock: typed_symbol!(lib, "nvmlDeviceGetClockInfo", ClockFn),
            max_clock: typed_symbol!(lib, "nvmlDeviceGetMaxClockInfo", ClockFn),
            power: typed_symbol!(lib, "nvmlDeviceGetPowerUsage", UintFn),
            energy: typed_symbol!(lib, "nvmlDeviceGetTotalEnergyConsumption", U64Fn),
            temperature: typed_symbol!(lib, "nvmlDeviceGetTemperature", ClockFn),
            reasons,
            memory: typed_symbol!(lib, "nvmlDeviceGetMemoryInfo", MemFn),
            pcie: typed_symbol!(lib, "nvmlDeviceGetPcieThroughput", ClockFn),
            field_values: typed_symbol!(lib, "nvmlDeviceGetFieldValues", FieldValuesFn),
            ecc: typed_symbol!(lib, "nvmlDeviceGetTotalEccErrors", EccFn),
            event_set_create: typed_symbol!(lib, "nvmlEventSetCreate", EventSetCreateFn),
            register_events: typed_symbol!(lib, "nvmlDeviceRegisterEvents", RegisterEventsFn),
            event_set_wait: typed_symbol!(lib, "nvmlEventSetWait_v2", EventSetWaitFn),
            event_set_free: typed_symbol!(lib, "nvmlEventSetFree", EventSetFreeFn),
            error_string: typed_symbol!(lib, "nvmlErrorString", ErrorStringFn),
        })
    }

    /// The one conversion of a return code into a `Result`.
    fn check(&self, call: &'static str, code: NvmlReturn) -> Result<(), CallError> {
        if code == SUCCESS {
            return Ok(());
        }
        let message = self
            .error_string
            .map(|f| {
                // Safety: nvmlErrorString takes any code and returns a
                // static NUL-terminated string (or NULL).
                let p = unsafe { f(code) };
                if p.is_null() {
                    String::from("no description")
                } else {
                    // Safety: non-null, NUL-terminated, static.
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            })
            .unwrap_or_else(|| "no description".into());
        Err(CallError::described(call, code, message))
    }

    fn missing(call: &'static str) -> CallError {
        CallError::described(call, ERROR_FUNCTION_NOT_FOUND, "not in this libnvidia-ml")
    }

    /// `nvmlInit_v2`.
    pub fn init(&self) -> Result<(), CallError> {
        // Safety: no arguments; callable from any thread.
        self.check("nvmlInit_v2", unsafe { (self.init)() })
    }

    /// `nvmlDeviceGetCount_v2`.
    pub fn count(&self) -> Result<u32, CallError> {
        let mut n: c_uint = 0;
        // Safety: `n` is a valid out-pointer.
        self.check("nvmlDeviceGetCount_v2", unsafe { (self.count)(&mut n) })?;
        Ok(n)
    }

    /// `nvmlDeviceGetHandleByIndex_v2`.
    pub fn by_index(&self, index: u32) -> Result<Device, CallError> {
        let mut d: Device = std::ptr::null_mut();
        // Safety: `d` is a valid out-pointer.
        self.check("nvmlDeviceGetHandleByIndex_v2", unsafe { (self.by_index)(index, &mut d) })?;
        Ok(d)
    }

    /// `nvmlDeviceGetHandleByUUID` (`uuid` as CUDA prints it, `GPU-…`).
    pub fn by_uuid(&self, uuid: &str) -> Result<Device, CallError> {
        let f = self.by_uuid.ok_or_else(|| Nvml::missing("nvmlDeviceGetHandleByUUID"))?;
        let c = std::ffi::CString::new(uuid)
            .map_err(|_| CallError::described("nvmlDeviceGetHandleByUUID", ERROR_NOT_FOUND, "the UUID holds a NUL byte"))?;
        let mut d: Device = std::ptr::null_mut();
        // Safety: `c` is NUL-terminated, `d` a valid out-pointer.
        self.check("nvmlDeviceGetHandleByUUID", unsafe { f(c.as_ptr(), &mut d) })?;
        Ok(d)
    }

    /// `nvmlDeviceGetUtilizationRates`.
    pub fn utilization(&self, d: Device) -> Result<Utilization, CallError> {
        const CALL: &str = "nvmlDeviceGetUtilizationRates";
        let f = self.utilization.ok_or_else(|| Nvml::missing(CALL))?;
        let mut u = Utilization::default();
        // Safety: `d` came from NVML, `u` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, &mut u) })?;
        Ok(u)
    }

    /// `nvmlDeviceGetClockInfo(d, clock)`, MHz.
    pub fn clock(&self, d: Device, clock: c_uint) -> Result<u32, CallError> {
        self.uint_arg("nvmlDeviceGetClockInfo", self.clock, d, clock)
    }

    /// `nvmlDeviceGetMaxClockInfo(d, clock)`, MHz.
    pub fn max_clock(&self, d: Device, clock: c_uint) -> Result<u32, CallError> {
        self.uint_arg("nvmlDeviceGetMaxClockInfo", self.max_clock, d, clock)
    }

    /// `nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU)`, °C.
    pub fn temperature(&self, d: Device) -> Result<u32, CallError> {
        self.uint_arg("nvmlDeviceGetTemperature", self.temperature, d, TEMPERATURE_GPU)
    }

    /// `nvmlDeviceGetPcieThroughput(d, counter)`, KB/s.
    pub fn pcie(&self, d: Device, counter: c_uint) -> Result<u32, CallError> {
        self.uint_arg("nvmlDeviceGetPcieThroughput", self.pcie, d, counter)
    }

    fn uint_arg(&self, call: &'static str, f: Option<ClockFn>, d: Device, arg: c_uint) -> Result<u32, CallError> {
        let f = f.ok_or_else(|| Nvml::missing(call))?;
        let mut v: c_uint = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(call, unsafe { f(d, arg, &mut v) })?;
        Ok(v)
    }

    /// `nvmlDeviceGetPowerUsage`, mW.
    pub fn power(&self, d: Device) -> Result<u32, CallError> {
        const CALL: &str = "nvmlDeviceGetPowerUsage";
        let f = self.power.ok_or_else(|| Nvml::missing(CALL))?;
        let mut v: c_uint = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, &mut v) })?;
        Ok(v)
    }

    /// `nvmlDeviceGetTotalEnergyConsumption`, mJ.
    pub fn energy(&self, d: Device) -> Result<u64, CallError> {
        const CALL: &str = "nvmlDeviceGetTotalEnergyConsumption";
        let f = self.energy.ok_or_else(|| Nvml::missing(CALL))?;
        let mut v: c_ulonglong = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, &mut v) })?;
        Ok(v)
    }

    /// The current clocks-event (throttle) reasons, a bit mask.
    pub fn reasons(&self, d: Device) -> Result<u64, CallError> {
        let (f, call) = self
            .reasons
            .ok_or_else(|| Nvml::missing("nvmlDeviceGetCurrentClocksEventReasons"))?;
        let mut v: c_ulonglong = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(call, unsafe { f(d, &mut v) })?;
        Ok(v)
    }

    /// `nvmlDeviceGetMemoryInfo`.
    pub fn memory(&self, d: Device) -> Result<Memory, CallError> {
        const CALL: &str = "nvmlDeviceGetMemoryInfo";
        let f = self.memory.ok_or_else(|| Nvml::missing(CALL))?;
        let mut m = Memory::default();
        // Safety: `d` came from NVML, `m` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, &mut m) })?;
        Ok(m)
    }

    /// One field of `nvmlDeviceGetFieldValues(d, 1, …)` at `scope`, as an
    /// unsigned integer. `call` names the field in errors: the call itself
    /// can succeed with the field's own `nvmlReturn` failing (a GPU without
    /// NVLink answers `NVML_ERROR_NOT_SUPPORTED` there).
    pub fn field_value(&self, d: Device, field: c_uint, scope: c_uint, call: &'static str) -> Result<u64, CallError> {
        const FN: &str = "nvmlDeviceGetFieldValues";
        let f = self.field_values.ok_or_else(|| Nvml::missing(FN))?;
        let mut v = [FieldValue::ask(field, scope)];
        // Safety: `d` came from NVML; `v` is an array of one
        // `nvmlFieldValue_t` with its fieldId and scopeId set.
        self.check(FN, unsafe { f(d, 1, v.as_mut_ptr()) })?;
        self.check(call, v[0].nvml_return)?;
        v[0].as_u64()
            .ok_or_else(|| CallError::described(call, v[0].value_type, "a value type this agent does not read"))
    }

    /// `nvmlDeviceGetTotalEccErrors(d, error_type, NVML_VOLATILE_ECC)`.
    pub fn ecc_errors(&self, d: Device, error_type: c_uint) -> Result<u64, CallError> {
        const CALL: &str = "nvmlDeviceGetTotalEccErrors";
        let f = self.ecc.ok_or_else(|| Nvml::missing(CALL))?;
        let mut v: c_ulonglong = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, error_type, VOLATILE_ECC, &mut v) })?;
        Ok(v)
    }

    /// `nvmlEventSetCreate`. Free the set with [`Nvml::event_set_free`].
    pub fn event_set_create(&self) -> Result<EventSet, CallError> {
        const CALL: &str = "nvmlEventSetCreate";
        let f = self.event_set_create.ok_or_else(|| Nvml::missing(CALL))?;
        // The set is freed with nvmlEventSetFree: without it there is no
        // point in making one.
        self.event_set_free.ok_or_else(|| Nvml::missing("nvmlEventSetFree"))?;
        self.event_set_wait.ok_or_else(|| Nvml::missing("nvmlEventSetWait_v2"))?;
        let mut set: EventSet = std::ptr::null_mut();
        // Safety: `set` is a valid out-pointer.
        self.check(CALL, unsafe { f(&mut set) })?;
        Ok(set)
    }

    /// `nvmlDeviceRegisterEvents(d, types, set)`.
    pub fn register_events(&self, d: Device, types: c_ulonglong, set: EventSet) -> Result<(), CallError> {
        const CALL: &str = "nvmlDeviceRegisterEvents";
        let f = self.register_events.ok_or_else(|| Nvml::missing(CALL))?;
        // Safety: `d` and `set` came from NVML and the set is not freed.
        self.check(CALL, unsafe { f(d, types, set) })
    }

    /// `nvmlEventSetWait_v2(set, …, timeout_ms)`: the next event, or `None`
    /// when none arrived (`NVML_ERROR_TIMEOUT`).
    pub fn event_set_wait(&self, set: EventSet, timeout_ms: c_uint) -> Result<Option<EventData>, CallError> {
        const CALL: &str = "nvmlEventSetWait_v2";
        let f = self.event_set_wait.ok_or_else(|| Nvml::missing(CALL))?;
        let mut data = EventData::default();
        // Safety: `set` came from NVML and is not freed; `data` is a valid
        // out-pointer to an `nvmlEventData_t`.
        let code = unsafe { f(set, &mut data, timeout_ms) };
        if code == ERROR_TIMEOUT {
            return Ok(None);
        }
        self.check(CALL, code)?;
        Ok(Some(data))
    }

    /// `nvmlEventSetFree(set)`; `set` must not be used afterwards.
    pub fn event_set_free(&self, set: EventSet) -> Result<(), CallError> {
        const CALL: &str = "nvmlEventSetFree";
        let f = self.event_set_free.ok_or_else(|| Nvml::missing(CALL))?;
        // Safety: `set` came from nvmlEventSetCreate; the caller frees it once.
        self.check(CALL, unsafe { f(set) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The layouts of nvml.h (NVML 13) on a 64-bit Linux: a field out of
    /// place would read garbage, not fail.
    #[test]
    fn structs_have_nvml_h_layouts() {
        assert_eq!(size_of::<Value>(), 8);
        assert_eq!(size_of::<FieldValue>(), 40);
        assert_eq!(offset_of!(FieldValue, field_id), 0);
        assert_eq!(offset_of!(FieldValue, scope_id), 4);
        assert_eq!(offset_of!(FieldValue, timestamp), 8);
        assert_eq!(offset_of!(FieldValue, latency_usec), 16);
        assert_eq!(offset_of!(FieldValue, value_type), 24);
        assert_eq!(offset_of!(FieldValue, nvml_return), 28);
        assert_eq!(offset_of!(FieldValue, value), 32);
        assert_eq!(size_of::<EventData>(), 32);
        assert_eq!(offset_of!(EventData, device), 0);
        assert_eq!(offset_of!(EventData, event_type), 8);
        assert_eq!(offset_of!(EventData, event_data), 16);
        assert_eq!(offset_of!(EventData, gpu_instance_id), 24);
        assert_eq!(offset_of!(EventData, compute_instance_id), 28);
        assert_eq!(size_of::<Memory>(), 24);
        assert_eq!(size_of::<Utilization>(), 8);
    }

    #[test]
    fn field_values_read_by_their_type() {
        let mut v = FieldValue::ask(FI_DEV_NVLINK_THROUGHPUT_DATA_TX, SCOPE_ALL_LINKS);
        assert_eq!(v.scope_id, u32::MAX);
        v.value = Value { ull: 1 << 40 };
        assert_eq!(v.as_u64(), Some(1 << 40));
        v.value_type = value_type::UNSIGNED_INT;
        v.value = Value { ui: 7 };
        assert_eq!(v.as_u64(), Some(7));
        v.value_type = value_type::SIGNED_LONG_LONG;
        v.value = Value { sll: -5 };
        assert_eq!(v.as_u64(), Some(0));
        v.value_type = value_type::DOUBLE;
        v.value = Value { d: 12.9 };
        assert_eq!(v.as_u64(), Some(12));
        v.value_type = 77;
        assert_eq!(v.as_u64(), None);
    }
}
