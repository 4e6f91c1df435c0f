//! Run-time loading: `dlopen`/`dlsym` with the flags we need (`RTLD_NOLOAD`
//! to reuse a library the process already has), and the libcupti search.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// A symbol name literal as a C string, checked at compile time (a name
/// with an inner NUL does not build).
macro_rules! symbol_name {
    ($name:literal) => {
        const {
            match ::std::ffi::CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("a symbol name has no NUL byte"),
            }
        }
    };
}

/// `$lib`'s entry point `$name` as the function pointer type `$ty`, or
/// `None` when the library does not have it. `$ty` must be the signature
/// the header that declares `$name` gives it: for CUPTI the type cupti-sys
/// generated (every CUPTI 12.x/13.x the agent loads keeps that signature;
/// cupti-sys's layout tests check both headers), for NVML and the CUDA
/// driver and runtime the type declared beside the call from `nvml.h`,
/// `cuda.h` or `cuda_runtime_api.h`.
macro_rules! typed_symbol {
    ($lib:expr, $name:literal, $ty:ty) => {{
        let p = $lib.sym($crate::dl::symbol_name!($name));
        if p.is_null() {
            None
        } else {
            // Safety: see the macro's contract above: the symbol has the C
            // signature `$ty` was generated from.
            Some(unsafe { ::std::mem::transmute::<*mut libc::c_void, $ty>(p) })
        }
    }};
}

/// A required entry point: [`typed_symbol!`], or (returned with `?` from
/// the enclosing function) the [`MissingSymbol`] naming it.
macro_rules! required_symbol {
    ($lib:expr, $name:literal, $ty:ty) => {
        $crate::dl::typed_symbol!($lib, $name, $ty).ok_or($crate::dl::MissingSymbol($name))?
    };
}

pub(crate) use {required_symbol, symbol_name, typed_symbol};

/// A required entry point the library does not have (its name; each caller
/// words the message for its library).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissingSymbol(pub &'static str);

impl std::fmt::Display for MissingSymbol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for MissingSymbol {}

/// A `dlopen` handle. Never closed: CUPTI keeps calling into us, and
/// unloading a library a CUDA process uses is never safe.
#[derive(Clone, Copy, Debug)]
pub struct Lib(pub *mut libc::c_void);

// Safety: a dlopen handle is a process-global token, valid on any thread.
unsafe impl Send for Lib {}
// Safety: as above; dlsym is thread-safe.
unsafe impl Sync for Lib {}

impl Lib {
    /// `dlopen(name, RTLD_NOW | RTLD_LOCAL | extra)`.
    pub fn open(name: &str, extra: libc::c_int) -> Option<Lib> {
        let c = CString::new(name).ok()?;
        // Safety: `c` is a valid NUL-terminated string; dlopen has no other
        // preconditions.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL | extra) };
        (!h.is_null()).then_some(Lib(h))
    }

    /// The library if it is already loaded in this process (never loads it).
    pub fn loaded(name: &str) -> Option<Lib> {
        Lib::open(name, libc::RTLD_NOLOAD)
    }

    /// Address of `symbol`, or null.
    pub fn sym(&self, symbol: &CStr) -> *mut libc::c_void {
        // Safety: the handle came from dlopen and is never closed.
        unsafe { libc::dlsym(self.0, symbol.as_ptr()) }
    }

    /// The file this handle was loaded from (via a symbol in it).
    pub fn path_of(&self, symbol: &CStr) -> Option<PathBuf> {
        let addr = self.sym(symbol);
        if addr.is_null() {
            return None;
        }
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // Safety: `addr` is a symbol address in a loaded object; dladdr
        // only fills `info`.
        if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // Safety: dladdr returned a NUL-terminated path owned by the loader.
        let s = unsafe { CStr::from_ptr(info.dli_fname) };
        Some(PathBuf::from(s.to_string_lossy().into_owned()))
    }
}

/// Is the CUDA driver library loaded in this process? CUPTI 13.2 crashes on
/// its first call when it is not (it recurses while trying to load it), so
/// nothing in libcupti is called unless this is true.
pub fn libcuda_loaded() -> Option<Lib> {
    Lib::loaded("libcuda.so.1").or_else(|| Lib::loaded("libcuda.so"))
}

/// Where libcupti was found, or every place that was tried.
pub struct CuptiSearch {
    /// The loaded library and the path or name it was loaded by.
    pub found: Option<(Lib, String)>,
    /// Every candidate tried, in order.
    pub searched: Vec<String>,
}

const SONAMES: [&str; 3] = ["libcupti.so.13", "libcupti.so.12", "libcupti.so"];

/// Find libcupti: a copy the process already loaded (e.g. PyTorch's wheel
/// copy), `$GPUTRACE_CUPTI`, the wheel directories next to the loaded CUDA
/// runtime, `$CUDA_HOME`, then the system search path.
pub fn find_cupti(env_override: Option<String>, cuda_home: Option<String>) -> CuptiSearch {
    let mut searched = Vec::new();
    for name in SONAMES {
        searched.push(format!("{name} (already loaded)"));
        if let Some(l) = Lib::loaded(name) {
            return CuptiSearch {
                found: Some((l, format!("{name} (already loaded)"))),
                searched,
            };
        }
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = env_override.filter(|p| !p.is_empty()) {
        candidates.push(PathBuf::from(p));
    }
    candidates.extend(wheel_dirs().into_iter().flat_map(|d| SONAMES.map(|n| d.join(n))));
    if let Some(h) = cuda_home.filter(|h| !h.is_empty()) {
        let h = PathBuf::from(h);
        for d in [h.join("extras/CUPTI/lib64"), h.join("lib64"), h.join("targets/x86_64-linux/lib")] {
            candidates.extend(SONAMES.map(|n| d.join(n)));
        }
    }
    for c in candidates {
        let s = c.display().to_string();
        searched.push(s.clone());
        if c.is_file() {
            if let Some(l) = Lib::open(&s, 0) {
                return CuptiSearch {
                    found: Some((l, s)),
                    searched,
                };
            }
        }
    }
    for name in SONAMES {
        searched.push(format!("{name} (system search path)"));
        if let Some(l) = Lib::open(name, 0) {
            return CuptiSearch {
                found: Some((l, name.to_string())),
                searched,
            };
        }
    }
    CuptiSearch { found: None, searched }
}

/// Directories where the PyPI wheels put libcupti, found from wherever the
/// CUDA runtime (or libtorch) this process loaded lives:
/// `site-packages/nvidia/cuda_cupti/lib` (CUDA 12) and
/// `site-packages/nvidia/cu13/lib` (CUDA 13).
fn wheel_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let probes: [(&str, &CStr); 4] = [
        ("libcudart.so.13", c"cudaRuntimeGetVersion"),
        ("libcudart.so.12", c"cudaRuntimeGetVersion"),
        ("libtorch_cuda.so", c"_ZN3c104cuda9device_countEv"),
        ("libcudart.so", c"cudaRuntimeGetVersion"),
    ];
    for (lib, sym) in probes {
        let Some(path) = Lib::loaded(lib).and_then(|l| l.path_of(sym)) else {
            continue;
        };
        let Some(dir) = path.parent() else { continue };
        // .../site-packages/nvidia/cuda_runtime/lib/libcudart.so.12
        // .../site-packages/nvidia/cu13/lib/libcudart.so.13
        // .../site-packages/torch/lib/libtorch_cuda.so
        dirs.push(dir.to_path_buf());
        for up in [
            dir.join("../../cuda_cupti/lib"),
            dir.join("../../nvidia/cuda_cupti/lib"),
            dir.join("../../nvidia/cu13/lib"),
        ] {
            dirs.push(up);
        }
    }
    dirs.retain(|d| Path::new(d).is_dir());
    dirs
}
