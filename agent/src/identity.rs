//! Who this process is: the trace header, from the environment, `/proc`
//! and the CUDA driver.

use crate::decode::{uuid_string, SeenDevice};
use crate::dl::{typed_symbol, Lib};
use gputrace_format::*;
use std::ffi::CStr;
use std::time::{Duration, Instant};

/// Host name, or "unknown-host".
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // Safety: valid buffer and length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) };
    if rc != 0 {
        return "unknown-host".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let s = String::from_utf8_lossy(&buf[..end]).into_owned();
    if s.is_empty() {
        "unknown-host".into()
    } else {
        s
    }
}

/// argv of this process, from `/proc/self/cmdline`.
pub fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A file-name-safe version of `s`: only `[A-Za-z0-9._-]`, at most 64 chars.
pub fn sanitize(s: &str) -> String {
    let t: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if t.is_empty() || t.starts_with('.') {
        format!("h{t}")
    } else {
        t
    }
}

type CuResultFn1 = unsafe extern "C" fn(*mut libc::c_int) -> libc::c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut libc::c_int, libc::c_int) -> libc::c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut libc::c_char, libc::c_int, libc::c_int) -> libc::c_int;
type CuDeviceGetUuid = unsafe extern "C" fn(*mut [u8; 16], libc::c_int) -> libc::c_int;
type CuDeviceTotalMem = unsafe extern "C" fn(*mut usize, libc::c_int) -> libc::c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut libc::c_int, libc::c_int, libc::c_int) -> libc::c_int;

/// The driver version (`cuDriverGetVersion`).
pub fn driver_version(cuda: &Lib) -> Option<u32> {
    let f = typed_symbol!(cuda, "cuDriverGetVersion", CuResultFn1)?;
    let mut v = 0;
    // Safety: valid out-pointer; needs no initialized driver.
    (unsafe { f(&mut v) } == 0).then_some(v as u32)
}

/// The runtime version, if a CUDA runtime is loaded.
pub fn runtime_version() -> Option<u32> {
    for name in ["libcudart.so.13", "libcudart.so.12", "libcudart.so"] {
        if let Some(l) = Lib::loaded(name) {
            let f = typed_symbol!(&l, "cudaRuntimeGetVersion", CuResultFn1)?;
            let mut v = 0;
            // Safety: valid out-pointer; this call does not initialize CUDA.
            if unsafe { f(&mut v) } == 0 {
                return Some(v as u32);
            }
        }
    }
    None
}

/// The devices, from the driver. `cuInit` may still be running on another
/// thread when the writer starts, so this retries until `deadline`.
pub fn devices(cuda: &Lib, wait: Duration) -> Vec<DeviceInfo> {
    let (Some(count), Some(get)) = (
        typed_symbol!(cuda, "cuDeviceGetCount", CuResultFn1),
        typed_symbol!(cuda, "cuDeviceGet", CuDeviceGet),
    ) else {
        return Vec::new();
    };
    let deadline = Instant::now() + wait;
    let mut n = 0;
    // Safety (all driver calls here): valid out-pointers and sizes.
    while unsafe { count(&mut n) } != 0 {
        if Instant::now() >= deadline {
            return Vec::new();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let name_fn = typed_symbol!(cuda, "cuDeviceGetName", CuDeviceGetName);
    let uuid_fn =
        typed_symbol!(cuda, "cuDeviceGetUuid_v2", CuDeviceGetUuid).or_else(|| typed_symbol!(cuda, "cuDeviceGetUuid", CuDeviceGetUuid));
    let mem_fn = typed_symbol!(cuda, "cuDeviceTotalMem_v2", CuDeviceTotalMem);
    let attr_fn = typed_symbol!(cuda, "cuDeviceGetAttribute", CuDeviceGetAttribute);
    let mut out = Vec::new();
    for ordinal in 0..n.clamp(0, 64) {
        let mut dev = 0;
        if unsafe { get(&mut dev, ordinal) } != 0 {
            continue;
        }
        let attr = |a: libc::c_int| -> u32 {
            let mut v = 0;
            match attr_fn {
                Some(f) if unsafe { f(&mut v, a, dev) } == 0 => v.max(0) as u32,
                _ => 0,
            }
        };
        let mut name = [0 as libc::c_char; 256];
        let name = match name_fn {
            Some(f) if unsafe { f(name.as_mut_ptr(), 255, dev) } == 0 => {
                // The driver wrote at most 255 bytes: the last stays NUL.
                let bytes = name.map(|c| c as u8);
                CStr::from_bytes_until_nul(&bytes).map_or(String::new(), |c| c.to_string_lossy().into_owned())
            }
            _ => String::new(),
        };
        let mut uuid = [0u8; 16];
        let uuid = match uuid_fn {
            Some(f) if unsafe { f(&mut uuid, dev) } == 0 => uuid_string(&uuid),
            _ => String::new(),
        };
        let mut mem = 0usize;
        let memory_bytes = match mem_fn {
            Some(f) if unsafe { f(&mut mem, dev) } == 0 => mem as u64,
            _ => 0,
        };
        // CU_DEVICE_ATTRIBUTE_*: 16 multiprocessors, 75/76 compute
        // capability, 50 PCI domain, 33 PCI bus, 34 PCI device.
        let pci = format!("{:04x}:{:02x}:{:02x}.0", attr(50), attr(33), attr(34));
        out.push(DeviceInfo {
            ordinal: DeviceId(ordinal as u32),
            uuid,
            name,
            sm_count: attr(16),
            memory_bytes,
            compute_capability: (attr(75), attr(76)),
            pci_bus_id: pci,
        });
    }
    out
}

/// Devices from CUPTI DEVICE records, when the driver could not be asked.
pub fn devices_from_records(seen: &[SeenDevice]) -> Vec<DeviceInfo> {
    seen.iter()
        .map(|d| DeviceInfo {
            ordinal: DeviceId(d.id),
            uuid: uuid_string(&d.uuid),
            name: d.name.clone(),
            sm_count: d.sm_count,
            memory_bytes: d.memory,
            compute_capability: d.cc,
            pci_bus_id: String::new(),
        })
        .collect()
}
