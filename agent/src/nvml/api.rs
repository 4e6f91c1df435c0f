//! NVML, loaded at run time: the few functions the sampler calls.
//!
//! The types and values are declared by hand from `nvml.h` (NVML 13.5, in
//! the `nvidia-nvml-dev` 13.5.37 wheel on PyPI: `pip download --no-deps
//! nvidia-nvml-dev`); every one used here is unchanged since NVML 11
//! (`nvmlDeviceGetCurrentClocksEventReasons` is 12.x's new name of
//! `nvmlDeviceGetCurrentClocksThrottleReasons`, which older drivers have
//! instead: both are looked up). Nothing is linked: a machine without the
//! NVIDIA driver has no `libnvidia-ml.so.1`, and the agent then samples
//! nothing.

use crate::dl::Lib;
use std::ffi::{c_char, c_uint, c_ulonglong, c_void, CStr};

/// `nvmlReturn_t` (a C enum: `int`-sized).
pub type NvmlReturn = c_uint;
/// `nvmlDevice_t` (`struct nvmlDevice_st *`).
pub type Device = *mut c_void;

/// `NVML_SUCCESS`.
pub const SUCCESS: NvmlReturn = 0;
/// `NVML_ERROR_NOT_FOUND`.
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
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

/// A failed NVML call: which function and what it returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmlError {
    /// The NVML function.
    pub call: &'static str,
    /// Its `nvmlReturn_t`.
    pub code: NvmlReturn,
    /// `nvmlErrorString(code)`, or a description of our own.
    pub message: String,
}

impl std::fmt::Display for NvmlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} returned {} ({})", self.call, self.code, self.message)
    }
}

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
    error_string: Option<ErrorStringFn>,
}

// Safety: NVML's functions are thread-safe (nvml.h: "NVML is thread-safe");
// the struct holds only function pointers.
unsafe impl Send for Nvml {}
// Safety: as above.
unsafe impl Sync for Nvml {}

fn sym<T: Copy>(lib: &Lib, name: &CStr) -> Option<T> {
    let p = lib.sym(name);
    if p.is_null() {
        return None;
    }
    debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // Safety: T is one of the function-pointer types above, declared with
    // the signature nvml.h gives `name`.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

impl Nvml {
    /// Look the functions up; `Err` names the first required one missing.
    pub fn resolve(lib: &Lib) -> Result<Nvml, String> {
        let need = |name: &'static CStr| -> Result<*mut c_void, String> {
            let p = lib.sym(name);
            if p.is_null() {
                Err(format!("{} not found in it", name.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        need(c"nvmlInit_v2")?;
        need(c"nvmlDeviceGetCount_v2")?;
        need(c"nvmlDeviceGetHandleByIndex_v2")?;
        let reasons = sym::<U64Fn>(lib, c"nvmlDeviceGetCurrentClocksEventReasons")
            .map(|f| (f, "nvmlDeviceGetCurrentClocksEventReasons"))
            .or_else(|| {
                sym::<U64Fn>(lib, c"nvmlDeviceGetCurrentClocksThrottleReasons").map(|f| (f, "nvmlDeviceGetCurrentClocksThrottleReasons"))
            });
        Ok(Nvml {
            init: sym(lib, c"nvmlInit_v2").expect("checked"),
            count: sym(lib, c"nvmlDeviceGetCount_v2").expect("checked"),
            by_index: sym(lib, c"nvmlDeviceGetHandleByIndex_v2").expect("checked"),
            by_uuid: sym(lib, c"nvmlDeviceGetHandleByUUID"),
            utilization: sym(lib, c"nvmlDeviceGetUtilizationRates"),
            clock: sym(lib, c"nvmlDeviceGetClockInfo"),
            max_clock: sym(lib, c"nvmlDeviceGetMaxClockInfo"),
            power: sym(lib, c"nvmlDeviceGetPowerUsage"),
            energy: sym(lib, c"nvmlDeviceGetTotalEnergyConsumption"),
            temperature: sym(lib, c"nvmlDeviceGetTemperature"),
            reasons,
            memory: sym(lib, c"nvmlDeviceGetMemoryInfo"),
            pcie: sym(lib, c"nvmlDeviceGetPcieThroughput"),
            error_string: sym(lib, c"nvmlErrorString"),
        })
    }

    /// The one conversion of a return code into a `Result`.
    fn check(&self, call: &'static str, code: NvmlReturn) -> Result<(), NvmlError> {
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
        Err(NvmlError { call, code, message })
    }

    fn missing(call: &'static str) -> NvmlError {
        NvmlError {
            call,
            code: ERROR_FUNCTION_NOT_FOUND,
            message: "not in this libnvidia-ml".into(),
        }
    }

    /// `nvmlInit_v2`.
    pub fn init(&self) -> Result<(), NvmlError> {
        // Safety: no arguments; callable from any thread.
        self.check("nvmlInit_v2", unsafe { (self.init)() })
    }

    /// `nvmlDeviceGetCount_v2`.
    pub fn count(&self) -> Result<u32, NvmlError> {
        let mut n: c_uint = 0;
        // Safety: `n` is a valid out-pointer.
        self.check("nvmlDeviceGetCount_v2", unsafe { (self.count)(&mut n) })?;
        Ok(n)
    }

    /// `nvmlDeviceGetHandleByIndex_v2`.
    pub fn by_index(&self, index: u32) -> Result<Device, NvmlError> {
        let mut d: Device = std::ptr::null_mut();
        // Safety: `d` is a valid out-pointer.
        self.check("nvmlDeviceGetHandleByIndex_v2", unsafe { (self.by_index)(index, &mut d) })?;
        Ok(d)
    }

    /// `nvmlDeviceGetHandleByUUID` (`uuid` as CUDA prints it, `GPU-…`).
    pub fn by_uuid(&self, uuid: &str) -> Result<Device, NvmlError> {
        let f = self.by_uuid.ok_or_else(|| Nvml::missing("nvmlDeviceGetHandleByUUID"))?;
        let c = std::ffi::CString::new(uuid).map_err(|_| NvmlError {
            call: "nvmlDeviceGetHandleByUUID",
            code: ERROR_NOT_FOUND,
            message: "the UUID holds a NUL byte".into(),
        })?;
        let mut d: Device = std::ptr::null_mut();
        // Safety: `c` is NUL-terminated, `d` a valid out-pointer.
        self.check("nvmlDeviceGetHandleByUUID", unsafe { f(c.as_ptr(), &mut d) })?;
        Ok(d)
    }

    /// `nvmlDeviceGetUtilizationRates`.
    pub fn utilization(&self, d: Device) -> Result<Utilization, NvmlError> {
        const CALL: &str = "nvmlDeviceGetUtilizationRates";
        let f = self.utilization.ok_or_else(|| Nvml::missing(CALL))?;
        let mut u = Utilization::default();
        // Safety: `d` came from NVML, `u` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, &mut u) })?;
        Ok(u)
    }

    /// `nvmlDeviceGetClockInfo(d, clock)`, MHz.
    pub fn clock(&self, d: Device, clock: c_uint) -> Result<u32, NvmlError> {
        self.uint_arg("nvmlDeviceGetClockInfo", self.clock, d, clock)
    }

    /// `nvmlDeviceGetMaxClockInfo(d, clock)`, MHz.
    pub fn max_clock(&self, d: Device, clock: c_uint) -> Result<u32, NvmlError> {
        self.uint_arg("nvmlDeviceGetMaxClockInfo", self.max_clock, d, clock)
    }

    /// `nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU)`, °C.
    pub fn temperature(&self, d: Device) -> Result<u32, NvmlError> {
        self.uint_arg("nvmlDeviceGetTemperature", self.temperature, d, TEMPERATURE_GPU)
    }

    /// `nvmlDeviceGetPcieThroughput(d, counter)`, KB/s.
    pub fn pcie(&self, d: Device, counter: c_uint) -> Result<u32, NvmlError> {
        self.uint_arg("nvmlDeviceGetPcieThroughput", self.pcie, d, counter)
    }

    fn uint_arg(&self, call: &'static str, f: Option<ClockFn>, d: Device, arg: c_uint) -> Result<u32, NvmlError> {
        let f = f.ok_or_else(|| Nvml::missing(call))?;
        let mut v: c_uint = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(call, unsafe { f(d, arg, &mut v) })?;
        Ok(v)
    }

    /// `nvmlDeviceGetPowerUsage`, mW.
    pub fn power(&self, d: Device) -> Result<u32, NvmlError> {
        const CALL: &str = "nvmlDeviceGetPowerUsage";
        let f = self.power.ok_or_else(|| Nvml::missing(CALL))?;
        let mut v: c_uint = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, &mut v) })?;
        Ok(v)
    }

    /// `nvmlDeviceGetTotalEnergyConsumption`, mJ.
    pub fn energy(&self, d: Device) -> Result<u64, NvmlError> {
        const CALL: &str = "nvmlDeviceGetTotalEnergyConsumption";
        let f = self.energy.ok_or_else(|| Nvml::missing(CALL))?;
        let mut v: c_ulonglong = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, &mut v) })?;
        Ok(v)
    }

    /// The current clocks-event (throttle) reasons, a bit mask.
    pub fn reasons(&self, d: Device) -> Result<u64, NvmlError> {
        let (f, call) = self
            .reasons
            .ok_or_else(|| Nvml::missing("nvmlDeviceGetCurrentClocksEventReasons"))?;
        let mut v: c_ulonglong = 0;
        // Safety: `d` came from NVML, `v` is a valid out-pointer.
        self.check(call, unsafe { f(d, &mut v) })?;
        Ok(v)
    }

    /// `nvmlDeviceGetMemoryInfo`.
    pub fn memory(&self, d: Device) -> Result<Memory, NvmlError> {
        const CALL: &str = "nvmlDeviceGetMemoryInfo";
        let f = self.memory.ok_or_else(|| Nvml::missing(CALL))?;
        let mut m = Memory::default();
        // Safety: `d` came from NVML, `m` is a valid out-pointer.
        self.check(CALL, unsafe { f(d, &mut m) })?;
        Ok(m)
    }
}
