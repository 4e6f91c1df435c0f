//! The functions NVTX calls once `InitializeInjectionNvtx2` installed them,
//! and the bodies of `InitializeInjectionNvtx2` and `gputrace_mark`. Each
//! catches panics; on any failure it returns what NVTX's no-op would. This
//! part of the entry layer sits above the recorder (`nvtx/`) and the
//! session: the first call registers the exit handler that writes the
//! markers when no session ran.

use crate::nvtx::abi::{self, EventAttributes};
use crate::nvtx::{Msg, Nvtx, RecKind};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

type Wide = *const libc::wchar_t;
type Attr = *const EventAttributes;
const NO_DOMAIN: *const c_void = std::ptr::null();

/// The recorder's state, allocated on the first call; `None` when NVTX
/// capture is off.
fn state_or_init() -> Option<&'static Nvtx> {
    crate::nvtx::state_or_init(super::write_markers_at_exit)
}

/// Record one event; `default` when NVTX capture is off or anything failed.
fn ev(kind: RecKind, domain: *const c_void, attrs: Attr, msg: Msg, id: u64, default: i64) -> i64 {
    catch_unwind(AssertUnwindSafe(|| match state_or_init() {
        // Safety: NVTX hands us its caller's arguments, valid per its API.
        Some(s) => unsafe { s.event(kind, domain, attrs, msg, id) },
        None => default,
    }))
    .unwrap_or(default)
}

fn with<T>(default: T, f: impl FnOnce(&'static Nvtx) -> T) -> T {
    catch_unwind(AssertUnwindSafe(|| state_or_init().map_or_else(|| None, |s| Some(f(s)))))
        .ok()
        .flatten()
        .unwrap_or(default)
}

extern "C" fn mark_ex(a: Attr) {
    ev(RecKind::Mark, NO_DOMAIN, a, Msg::None, 0, 0);
}
extern "C" fn mark_a(m: *const c_char) {
    ev(RecKind::Mark, NO_DOMAIN, std::ptr::null(), Msg::Ascii(m), 0, 0);
}
extern "C" fn mark_w(m: Wide) {
    ev(RecKind::Mark, NO_DOMAIN, std::ptr::null(), Msg::Wide(m), 0, 0);
}
extern "C" fn range_start_ex(a: Attr) -> u64 {
    ev(RecKind::Start, NO_DOMAIN, a, Msg::None, 0, 0).max(0) as u64
}
extern "C" fn range_start_a(m: *const c_char) -> u64 {
    ev(RecKind::Start, NO_DOMAIN, std::ptr::null(), Msg::Ascii(m), 0, 0).max(0) as u64
}
extern "C" fn range_start_w(m: Wide) -> u64 {
    ev(RecKind::Start, NO_DOMAIN, std::ptr::null(), Msg::Wide(m), 0, 0).max(0) as u64
}
extern "C" fn range_end(id: u64) {
    ev(RecKind::End, NO_DOMAIN, std::ptr::null(), Msg::None, id, 0);
}
extern "C" fn range_push_ex(a: Attr) -> c_int {
    ev(RecKind::Push, NO_DOMAIN, a, Msg::None, 0, -1) as c_int
}
extern "C" fn range_push_a(m: *const c_char) -> c_int {
    ev(RecKind::Push, NO_DOMAIN, std::ptr::null(), Msg::Ascii(m), 0, -1) as c_int
}
extern "C" fn range_push_w(m: Wide) -> c_int {
    ev(RecKind::Push, NO_DOMAIN, std::ptr::null(), Msg::Wide(m), 0, -1) as c_int
}
extern "C" fn range_pop() -> c_int {
    ev(RecKind::Pop, NO_DOMAIN, std::ptr::null(), Msg::None, 0, -1) as c_int
}
extern "C" fn name_category_a(c: u32, n: *const c_char) {
    with((), |s| s.name_category(NO_DOMAIN, c, Msg::Ascii(n)));
}
extern "C" fn name_category_w(c: u32, n: Wide) {
    with((), |s| s.name_category(NO_DOMAIN, c, Msg::Wide(n)));
}
extern "C" fn name_os_thread_a(t: u32, n: *const c_char) {
    with((), |s| s.name_thread(t, Msg::Ascii(n)));
}
extern "C" fn name_os_thread_w(t: u32, n: Wide) {
    with((), |s| s.name_thread(t, Msg::Wide(n)));
}

extern "C" fn domain_mark_ex(d: *const c_void, a: Attr) {
    ev(RecKind::Mark, d, a, Msg::None, 0, 0);
}
extern "C" fn domain_range_start_ex(d: *const c_void, a: Attr) -> u64 {
    ev(RecKind::Start, d, a, Msg::None, 0, 0).max(0) as u64
}
extern "C" fn domain_range_end(d: *const c_void, id: u64) {
    ev(RecKind::End, d, std::ptr::null(), Msg::None, id, 0);
}
extern "C" fn domain_range_push_ex(d: *const c_void, a: Attr) -> c_int {
    ev(RecKind::Push, d, a, Msg::None, 0, -1) as c_int
}
extern "C" fn domain_range_pop(d: *const c_void) -> c_int {
    ev(RecKind::Pop, d, std::ptr::null(), Msg::None, 0, -1) as c_int
}
extern "C" fn domain_resource_create(_d: *const c_void, _a: *mut c_void) -> *mut c_void {
    with(std::ptr::null_mut(), |s| s.create_resource())
}
extern "C" fn domain_resource_destroy(_r: *mut c_void) {}
extern "C" fn domain_name_category_a(d: *const c_void, c: u32, n: *const c_char) {
    with((), |s| s.name_category(d, c, Msg::Ascii(n)));
}
extern "C" fn domain_name_category_w(d: *const c_void, c: u32, n: Wide) {
    with((), |s| s.name_category(d, c, Msg::Wide(n)));
}
extern "C" fn domain_register_string_a(d: *const c_void, n: *const c_char) -> *mut c_void {
    with(std::ptr::null_mut(), |s| s.register_string(d, Msg::Ascii(n)))
}
extern "C" fn domain_register_string_w(d: *const c_void, n: Wide) -> *mut c_void {
    with(std::ptr::null_mut(), |s| s.register_string(d, Msg::Wide(n)))
}
extern "C" fn domain_create_a(n: *const c_char) -> *mut c_void {
    with(std::ptr::null_mut(), |s| s.create_domain(Msg::Ascii(n)))
}
extern "C" fn domain_create_w(n: Wide) -> *mut c_void {
    with(std::ptr::null_mut(), |s| s.create_domain(Msg::Wide(n)))
}
/// Domains stay in the table (their events may still be in the queue).
extern "C" fn domain_destroy(_d: *mut c_void) {}
/// `nvtxInitialize`: NVTX initialized us before calling it; nothing to do.
extern "C" fn initialize(_reserved: *const c_void) {}

/// Write `f` into slot `i` of NVTX's function table (of `size` slots).
///
/// # Safety
/// `table` is the table NVTX's `GetModuleFunctionTable` returned with `size`.
unsafe fn install(table: *mut *mut *const c_void, size: u32, i: usize, f: *const c_void) {
    if i >= size as usize {
        return; // an older NVTX without this function
    }
    // Safety: `i` < `size`, the table's length; each entry points at the
    // function-pointer variable NVTX calls through.
    unsafe {
        let slot = *table.add(i);
        if !slot.is_null() {
            *slot = f;
        }
    }
}

/// `InitializeInjectionNvtx2`'s body: 1 when our functions are installed.
///
/// # Safety
/// `get` is NVTX's export-table function.
pub unsafe fn initialize_injection(get: abi::GetExportTable) -> c_int {
    let Some(get) = get else { return 0 };
    if state_or_init().is_none() {
        return 0; // GPUTRACE_NVTX=0: NVTX makes every call a no-op
    }
    // Safety: NVTX's contract: the id's table or null.
    let etbl = unsafe { get(abi::ETID_CALLBACKS) } as *const abi::ExportTableCallbacks;
    // Safety: non-null tables are the struct the header declares; we read
    // `GetModuleFunctionTable` only when `struct_size` covers it.
    let gmft = match unsafe { etbl.as_ref() } {
        Some(t) if t.struct_size >= std::mem::size_of::<abi::ExportTableCallbacks>() => t.get_module_function_table,
        _ => None,
    };
    let Some(gmft) = gmft else {
        crate::say::say("NVTX gave no callback table; NVTX markers are not recorded");
        return 1; // not 0: NVTX would unload us with our exit handler registered
    };
    use abi::{core as c, core2 as c2};
    let core: [(usize, *const c_void); 15] = [
        (c::MARK_EX, mark_ex as *const c_void),
        (c::MARK_A, mark_a as *const c_void),
        (c::MARK_W, mark_w as *const c_void),
        (c::RANGE_START_EX, range_start_ex as *const c_void),
        (c::RANGE_START_A, range_start_a as *const c_void),
        (c::RANGE_START_W, range_start_w as *const c_void),
        (c::RANGE_END, range_end as *const c_void),
        (c::RANGE_PUSH_EX, range_push_ex as *const c_void),
        (c::RANGE_PUSH_A, range_push_a as *const c_void),
        (c::RANGE_PUSH_W, range_push_w as *const c_void),
        (c::RANGE_POP, range_pop as *const c_void),
        (c::NAME_CATEGORY_A, name_category_a as *const c_void),
        (c::NAME_CATEGORY_W, name_category_w as *const c_void),
        (c::NAME_OS_THREAD_A, name_os_thread_a as *const c_void),
        (c::NAME_OS_THREAD_W, name_os_thread_w as *const c_void),
    ];
    let core2: [(usize, *const c_void); 15] = [
        (c2::DOMAIN_MARK_EX, domain_mark_ex as *const c_void),
        (c2::DOMAIN_RANGE_START_EX, domain_range_start_ex as *const c_void),
        (c2::DOMAIN_RANGE_END, domain_range_end as *const c_void),
        (c2::DOMAIN_RANGE_PUSH_EX, domain_range_push_ex as *const c_void),
        (c2::DOMAIN_RANGE_POP, domain_range_pop as *const c_void),
        (c2::DOMAIN_RESOURCE_CREATE, domain_resource_create as *const c_void),
        (c2::DOMAIN_RESOURCE_DESTROY, domain_resource_destroy as *const c_void),
        (c2::DOMAIN_NAME_CATEGORY_A, domain_name_category_a as *const c_void),
        (c2::DOMAIN_NAME_CATEGORY_W, domain_name_category_w as *const c_void),
        (c2::DOMAIN_REGISTER_STRING_A, domain_register_string_a as *const c_void),
        (c2::DOMAIN_REGISTER_STRING_W, domain_register_string_w as *const c_void),
        (c2::DOMAIN_CREATE_A, domain_create_a as *const c_void),
        (c2::DOMAIN_CREATE_W, domain_create_w as *const c_void),
        (c2::DOMAIN_DESTROY, domain_destroy as *const c_void),
        (c2::INITIALIZE, initialize as *const c_void),
    ];
    for (module, fns) in [(abi::MODULE_CORE, &core), (abi::MODULE_CORE2, &core2)] {
        let mut table: *mut *mut *const c_void = std::ptr::null_mut();
        let mut size = 0u32;
        // Safety: NVTX's function with valid out-pointers.
        if unsafe { gmft(module, &mut table, &mut size) } == 0 || table.is_null() {
            crate::say::say("NVTX refused its function table; NVTX markers are not recorded");
            return 1; // not 0: NVTX would unload us with our exit handler registered
        }
        for &(i, f) in fns.iter() {
            // Safety: the table and size NVTX just returned.
            unsafe { install(table, size, i, f) };
        }
    }
    1
}

/// `gputrace_mark`'s body: an instant marker in the named domain.
///
/// # Safety
/// `domain` and `message` are null or NUL-terminated.
pub unsafe fn mark(domain: *const c_char, message: *const c_char) -> bool {
    // Safety: the caller's contract.
    state_or_init().is_some_and(|s| unsafe { crate::nvtx::mark(s, domain, message) })
}

/// `gputrace_request`'s body (see [`crate::nvtx::request`]).
pub fn request(id: u64, phase: u32, tokens: u64, time_ns: u64) -> bool {
    state_or_init().is_some_and(|s| crate::nvtx::request(s, id, phase, tokens, time_ns))
}
