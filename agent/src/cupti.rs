//! The CUPTI functions the agent uses, resolved at run time from whichever
//! libcupti was found, and one conversion from return codes to `Result`.

use crate::dl::{required_symbol, typed_symbol, Lib, MissingSymbol};
use crate::error::CallError;
use cupti_sys as sys;

/// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`: another tool holds CUPTI.
pub const MULTIPLE_SUBSCRIBERS: u32 = sys::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
/// `CUPTI_ERROR_MAX_LIMIT_REACHED`: the end of an activity buffer.
pub const MAX_LIMIT_REACHED: u32 = sys::CUPTI_ERROR_MAX_LIMIT_REACHED;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
pub const FLUSH_FORCED: u32 = 1;

fn check(call: &'static str, code: u32) -> Result<(), CallError> {
    if code == 0 {
        Ok(())
    } else {
        Err(CallError::cupti(call, code))
    }
}

/// What [`Cupti::disable_api_calls`] did.
#[derive(Debug, Default)]
pub struct ApiSwitches {
    /// Calls switched off.
    pub off: usize,
    /// Calls CUPTI refused to switch (unknown to this version, usually).
    pub refused: usize,
    /// The first refusal.
    pub first_error: Option<CallError>,
}

/// CUPTI's buffer callbacks in both flavours (the entry layer's functions:
/// they catch panics and touch only the session's pool).
#[derive(Clone, Copy)]
pub struct BufferCallbacks {
    pub requested: unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize),
    pub completed: unsafe extern "C" fn(sys::CUcontext, u32, *mut u8, usize, usize),
    pub requested_v2: unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize, *mut sys::CUpti_BufferCallbackRequestInfo),
    pub completed_v2: unsafe extern "C" fn(*mut u8, usize, usize, *mut sys::CUpti_BufferCallbackCompleteInfo),
}

/// The subscriber-scoped ("v2", multi-subscriber) entry points, present in
/// CUPTI 13.3 and later.
struct V2 {
    subscribe: sys::cuptiSubscribe_v2_t,
    register: sys::cuptiActivityRegisterCallbacks_v2_t,
    enable: sys::cuptiActivityEnable_v2_t,
    disable: sys::cuptiActivityDisable_v2_t,
    next_record: sys::cuptiActivityGetNextRecord_v2_t,
    dropped: sys::cuptiActivityGetNumDroppedRecords_v2_t,
    set_attribute: sys::cuptiActivitySetAttribute_v2_t,
    push_external: Option<sys::cuptiActivityPushExternalCorrelationId_v2_t>,
    pop_external: Option<sys::cuptiActivityPopExternalCorrelationId_v2_t>,
}

/// The subscriber handle once `cuptiSubscribe_v2` succeeded (then every
/// activity call must be the v2 one: CUPTI refuses to mix the two APIs).
struct Handle(sys::CUpti_SubscriberHandle);
// Safety: an opaque CUPTI token, valid on any thread.
unsafe impl Send for Handle {}
// Safety: as above; CUPTI synchronizes internally.
unsafe impl Sync for Handle {}

/// Size of `CUpti_SubscriberParams` with `allowMultipleSubscribers` (13.2+).
const SUBSCRIBER_PARAMS_SIZE: usize = 40;

/// Resolved CUPTI entry points. Every pointer was checked non-null.
pub struct Cupti {
    v2: Option<V2>,
    subscriber: std::sync::OnceLock<Handle>,
    get_version: sys::cuptiGetVersion_t,
    subscribe: sys::cuptiSubscribe_t,
    enable: sys::cuptiActivityEnable_t,
    disable: sys::cuptiActivityDisable_t,
    register: sys::cuptiActivityRegisterCallbacks_t,
    flush_all: sys::cuptiActivityFlushAll_t,
    next_record: sys::cuptiActivityGetNextRecord_t,
    dropped: sys::cuptiActivityGetNumDroppedRecords_t,
    timestamp: sys::cuptiGetTimestamp_t,
    set_thread_id_type: sys::cuptiSetThreadIdType_t,
    push_external: Option<sys::cuptiActivityPushExternalCorrelationId_t>,
    pop_external: Option<sys::cuptiActivityPopExternalCorrelationId_t>,
    /// Per-call switches for API records (CUPTI 12.5+; global scope only).
    runtime_api: Option<sys::cuptiActivityEnableRuntimeApi_t>,
    driver_api: Option<sys::cuptiActivityEnableDriverApi_t>,
    set_attribute: Option<sys::cuptiActivitySetAttribute_t>,
    /// `cuptiActivityEnableHWTrace` (CUPTI 12.8+).
    hw_trace: Option<sys::cuptiActivityEnableHWTrace_t>,
    /// `cuptiGetVersion`'s answer, noted at [`Cupti::subscribe`].
    version: std::sync::atomic::AtomicU32,
    /// The API calls to record when the subscriber-scoped API can take an
    /// allow-list at enable time (CUPTI 13.4+): runtime, driver callback ids.
    api_allowlist: std::sync::OnceLock<(Vec<u32>, Vec<u32>)>,
    /// How the last enabling of an API kind with the allow-list went.
    allowlist_outcome: std::sync::Mutex<Option<Result<(), CallError>>>,
}

/// `sizeof(CUpti_ActivityConfig)` (13.2+; `pKindOptions` is read from 13.4).
const ACTIVITY_CONFIG_SIZE: usize = 40;
/// `CUPTI_API_VERSION` from which `CUpti_ActivityConfig::pKindOptions` takes
/// an API allow-list (13.4).
pub const ALLOWLIST_SINCE: u32 = 130_400;

impl Cupti {
    /// Resolve the entry points. Calls nothing in the library.
    pub fn resolve(lib: &Lib) -> Result<Cupti, MissingSymbol> {
        let v2 = (|| {
            Some(V2 {
                subscribe: typed_symbol!(lib, "cuptiSubscribe_v2", sys::cuptiSubscribe_v2_t)?,
                register: typed_symbol!(lib, "cuptiActivityRegisterCallbacks_v2", sys::cuptiActivityRegisterCallbacks_v2_t)?,
                enable: typed_symbol!(lib, "cuptiActivityEnable_v2", sys::cuptiActivityEnable_v2_t)?,
                disable: typed_symbol!(lib, "cuptiActivityDisable_v2", sys::cuptiActivityDisable_v2_t)?,
                next_record: typed_symbol!(lib, "cuptiActivityGetNextRecord_v2", sys::cuptiActivityGetNextRecord_v2_t)?,
                dropped: typed_symbol!(
                    lib,
                    "cuptiActivityGetNumDroppedRecords_v2",
                    sys::cuptiActivityGetNumDroppedRecords_v2_t
                )?,
                set_attribute: typed_symbol!(lib, "cuptiActivitySetAttribute_v2", sys::cuptiActivitySetAttribute_v2_t)?,
                push_external: typed_symbol!(
                    lib,
                    "cuptiActivityPushExternalCorrelationId_v2",
                    sys::cuptiActivityPushExternalCorrelationId_v2_t
                ),
                pop_external: typed_symbol!(
                    lib,
                    "cuptiActivityPopExternalCorrelationId_v2",
                    sys::cuptiActivityPopExternalCorrelationId_v2_t
                ),
            })
        })();
        Ok(Cupti {
            v2,
            subscriber: std::sync::OnceLock::new(),
            get_version: required_symbol!(lib, "cuptiGetVersion", sys::cuptiGetVersion_t),
            subscribe: required_symbol!(lib, "cuptiSubscribe", sys::cuptiSubscribe_t),
            enable: required_symbol!(lib, "cuptiActivityEnable", sys::cuptiActivityEnable_t),
            disable: required_symbol!(lib, "cuptiActivityDisable", sys::cuptiActivityDisable_t),
            register: required_symbol!(lib, "cuptiActivityRegisterCallbacks", sys::cuptiActivityRegisterCallbacks_t),
            flush_all: required_symbol!(lib, "cuptiActivityFlushAll", sys::cuptiActivityFlushAll_t),
            next_record: required_symbol!(lib, "cuptiActivityGetNextRecord", sys::cuptiActivityGetNextRecord_t),
            dropped: required_symbol!(lib, "cuptiActivityGetNumDroppedRecords", sys::cuptiActivityGetNumDroppedRecords_t),
            timestamp: required_symbol!(lib, "cuptiGetTimestamp", sys::cuptiGetTimestamp_t),
            set_thread_id_type: required_symbol!(lib, "cuptiSetThreadIdType", sys::cuptiSetThreadIdType_t),
            push_external: typed_symbol!(
                lib,
                "cuptiActivityPushExternalCorrelationId",
                sys::cuptiActivityPushExternalCorrelationId_t
            ),
            pop_external: typed_symbol!(
                lib,
                "cuptiActivityPopExternalCorrelationId",
                sys::cuptiActivityPopExternalCorrelationId_t
            ),
            runtime_api: typed_symbol!(lib, "cuptiActivityEnableRuntimeApi", sys::cuptiActivityEnableRuntimeApi_t),
            driver_api: typed_symbol!(lib, "cuptiActivityEnableDriverApi", sys::cuptiActivityEnableDriverApi_t),
            set_attribute: typed_symbol!(lib, "cuptiActivitySetAttribute", sys::cuptiActivitySetAttribute_t),
            hw_trace: typed_symbol!(lib, "cuptiActivityEnableHWTrace", sys::cuptiActivityEnableHWTrace_t),
            version: std::sync::atomic::AtomicU32::new(0),
            api_allowlist: std::sync::OnceLock::new(),
            allowlist_outcome: std::sync::Mutex::new(None),
        })
    }

    /// `cuptiGetVersion`.
    pub fn version(&self) -> Result<u32, CallError> {
        let mut v = 0u32;
        // Safety: valid out-pointer.
        check("cuptiGetVersion", unsafe { (self.get_version)(&mut v) })?;
        Ok(v)
    }

    /// Claim CUPTI. With the multi-subscriber API (CUPTI 13.3+, with a
    /// driver that supports it), subscribe alongside other tools; otherwise
    /// take the single legacy slot, or learn who holds it (error 39).
    /// Returns whether the multi-subscriber API is in use.
    pub fn subscribe(&self, cupti_version: u32) -> Result<bool, CallError> {
        self.version.store(cupti_version, std::sync::atomic::Ordering::Relaxed);
        if let Some(v2) = self.v2.as_ref().filter(|_| cupti_version >= 130_301) {
            // Safety: a zeroed params struct is valid input; we set the size,
            // our name and the multi-subscriber request.
            let mut params: sys::CUpti_SubscriberParams = unsafe { std::mem::zeroed() };
            params.structSize = SUBSCRIBER_PARAMS_SIZE;
            params.subscriberName = c"gputrace".as_ptr();
            params.allowMultipleSubscribers = 1;
            let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
            // Safety: valid pointers; a None callback is allowed.
            let code = unsafe { (v2.subscribe)(&mut handle, None, std::ptr::null_mut(), &mut params) };
            match code {
                0 => {
                    let _ = self.subscriber.set(Handle(handle));
                    return Ok(true);
                }
                MULTIPLE_SUBSCRIBERS => return Err(CallError::cupti("cuptiSubscribe_v2", code)),
                // The driver cannot do multi-subscriber: fall back to legacy.
                _ => {}
            }
        }
        let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
        // Safety: valid out-pointer; a None callback is allowed.
        check("cuptiSubscribe", unsafe {
            (self.subscribe)(&mut handle, None, std::ptr::null_mut())
        })?;
        Ok(false)
    }

    fn v2(&self) -> Option<(&V2, sys::CUpti_SubscriberHandle)> {
        Some((self.v2.as_ref()?, self.subscriber.get()?.0))
    }

    /// Register the buffer callbacks (v1 or v2 flavour, matching the
    /// subscription).
    pub fn register(&self, callbacks: BufferCallbacks) -> Result<(), CallError> {
        if let Some((v2, h)) = self.v2() {
            // Safety: valid handle; the callbacks live for the process.
            return check("cuptiActivityRegisterCallbacks_v2", unsafe {
                (v2.register)(h, Some(callbacks.requested_v2), Some(callbacks.completed_v2))
            });
        }
        // Safety: both are valid extern "C" functions for the process lifetime.
        check("cuptiActivityRegisterCallbacks", unsafe {
            (self.register)(Some(callbacks.requested), Some(callbacks.completed))
        })
    }

    /// Enable an activity kind. With the subscriber-scoped API of CUPTI
    /// 13.4+ and an allow-list set ([`Self::set_api_allowlist`]), the
    /// RUNTIME and DRIVER kinds are enabled for the listed calls only; if
    /// CUPTI refuses the list, for every call (the decoder's filter then
    /// drops the rest), and [`Self::allowlist_outcome`] says which.
    pub fn enable(&self, kind: u32) -> Result<(), CallError> {
        if let Some((v2, h)) = self.v2() {
            if let Some(r) = self.enable_api_allowlisted(v2, h, kind) {
                return r;
            }
            // Safety: valid handle; NULL config means defaults.
            return check("cuptiActivityEnable_v2", unsafe { (v2.enable)(h, kind, std::ptr::null_mut()) });
        }
        // Safety: plain value call.
        check("cuptiActivityEnable", unsafe { (self.enable)(kind) })
    }

    /// The calls to record, for [`Self::enable`] (set once, before the API
    /// kinds are enabled). Returns whether this CUPTI takes an allow-list
    /// at enable time (subscriber-scoped API, CUPTI 13.4+).
    pub fn set_api_allowlist(&self, runtime: Vec<u32>, driver: Vec<u32>) -> bool {
        let _ = self.api_allowlist.set((runtime, driver));
        self.v2().is_some() && self.version.load(std::sync::atomic::Ordering::Relaxed) >= ALLOWLIST_SINCE
    }

    /// How the last enabling with the allow-list went (`None`: not tried).
    pub fn allowlist_outcome(&self) -> Option<Result<(), CallError>> {
        self.allowlist_outcome.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `cuptiActivityEnable_v2` of RUNTIME or DRIVER with the allow-list in
    /// `CUpti_ActivityApiOptions`; `None` when this does not apply. A refusal
    /// is noted and the kind enabled without the list.
    fn enable_api_allowlisted(&self, v2: &V2, h: sys::CUpti_SubscriberHandle, kind: u32) -> Option<Result<(), CallError>> {
        let (runtime, driver) = self.api_allowlist.get()?;
        let list = match kind {
            sys::CUPTI_ACTIVITY_KIND_RUNTIME => runtime,
            sys::CUPTI_ACTIVITY_KIND_DRIVER => driver,
            _ => return None,
        };
        if self.version.load(std::sync::atomic::Ordering::Relaxed) < ALLOWLIST_SINCE {
            return None;
        }
        let mut cbids = sys::CUpti_ActivityApiCbidOptions {
            structSize: std::mem::size_of::<sys::CUpti_ActivityApiCbidOptions>(),
            // CUPTI reads the list during the call only; it is not written.
            pCbids: list.as_ptr() as *mut sys::CUpti_CallbackId,
            numCbids: list.len(),
            enable: 1,
        };
        let mut options = sys::CUpti_ActivityApiOptions {
            structSize: std::mem::size_of::<sys::CUpti_ActivityApiOptions>(),
            pCbidOptions: &mut cbids,
        };
        let mut config = sys::CUpti_ActivityConfig {
            structSize: ACTIVITY_CONFIG_SIZE,
            pKindOptions: &mut options as *mut _ as *mut libc::c_void,
            ..Default::default()
        };
        // Safety: valid handle; `config` and what it points to live across the call.
        let r = check("cuptiActivityEnable_v2", unsafe { (v2.enable)(h, kind, &mut config) });
        *self.allowlist_outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.clone());
        Some(r.or_else(|_| {
            // Safety: valid handle; NULL config means defaults.
            check("cuptiActivityEnable_v2", unsafe { (v2.enable)(h, kind, std::ptr::null_mut()) })
        }))
    }

    /// Set a one-byte activity attribute (v1 or v2 flavour). `None` when
    /// this libcupti has no `cuptiActivitySetAttribute`.
    pub fn set_attribute_u8(&self, attr: u32, value: u8) -> Option<Result<(), CallError>> {
        let mut value = value;
        let mut size = 1usize;
        let ptr = &mut value as *mut u8 as *mut libc::c_void;
        if let Some((v2, h)) = self.v2() {
            // Safety: valid handle; value/size describe one byte.
            return Some(check("cuptiActivitySetAttribute_v2", unsafe {
                (v2.set_attribute)(h, attr, &mut size, ptr)
            }));
        }
        let f = self.set_attribute?;
        // Safety: value/size describe one byte.
        Some(check("cuptiActivitySetAttribute", unsafe { f(attr, &mut size, ptr) }))
    }

    /// Ask for kernel timestamps from the hardware event system (HES,
    /// Blackwell and newer): `cuptiActivityEnableHWTrace(1)`, or with the
    /// subscriber-scoped API the `ENABLE_HES` attribute. Must come before
    /// any activity kind is enabled. `None` when this libcupti has neither.
    pub fn enable_hw_trace(&self) -> Option<Result<(), CallError>> {
        if self.v2().is_some() {
            return self.set_attribute_u8(sys::CUPTI_ACTIVITY_ATTR_ENABLE_HES, 1);
        }
        let f = self.hw_trace?;
        // Safety: plain value call.
        Some(check("cuptiActivityEnableHWTrace", unsafe { f(1) }))
    }

    /// Disable an activity kind.
    pub fn disable(&self, kind: u32) -> Result<(), CallError> {
        if let Some((v2, h)) = self.v2() {
            // Safety: valid handle; NULL config means defaults.
            return check("cuptiActivityDisable_v2", unsafe { (v2.disable)(h, kind, std::ptr::null_mut()) });
        }
        // Safety: plain value call.
        check("cuptiActivityDisable", unsafe { (self.disable)(kind) })
    }

    /// Switch off the API records of the calls in `runtime` and `driver`
    /// (callback ids), so CUPTI does not record them at all. Call after
    /// enabling the RUNTIME and DRIVER kinds: enabling a kind resets these
    /// switches. Only in the global (legacy) scope; `None` when this CUPTI
    /// cannot (before 12.6, or subscriber-scoped), and then the decoder's
    /// filter drops those records after the fact. A cbid this CUPTI does not
    /// know (our table comes from newer headers) is refused with
    /// INVALID_PARAMETER: counted, and the rest still switched off.
    pub fn disable_api_calls(&self, runtime: impl Iterator<Item = u32>, driver: impl Iterator<Item = u32>) -> Option<ApiSwitches> {
        if self.v2().is_some() {
            return None;
        }
        let (rt, drv) = (self.runtime_api?, self.driver_api?);
        let mut out = ApiSwitches::default();
        let mut note = |r: Result<(), CallError>| match r {
            Ok(()) => out.off += 1,
            Err(e) => {
                out.refused += 1;
                out.first_error.get_or_insert(e);
            }
        };
        for cbid in runtime {
            // Safety: plain value call.
            note(check("cuptiActivityEnableRuntimeApi", unsafe { rt(cbid, 0) }));
        }
        for cbid in driver {
            // Safety: plain value call.
            note(check("cuptiActivityEnableDriverApi", unsafe { drv(cbid, 0) }));
        }
        Some(out)
    }

    /// `cuptiActivityFlushAll(flag)`. Never call from a CUPTI callback, and
    /// never from two threads at once (the caller holds the flush lock).
    pub fn flush_all(&self, flag: u32) -> Result<(), CallError> {
        // Safety: plain value call.
        check("cuptiActivityFlushAll", unsafe { (self.flush_all)(flag) })
    }

    /// `cuptiActivityGetNumDroppedRecords(NULL, 0, &n)` (resets on read).
    pub fn take_dropped(&self) -> Result<u64, CallError> {
        let mut n = 0usize;
        if let Some((v2, h)) = self.v2() {
            // Safety: valid handle and out-pointer.
            check("cuptiActivityGetNumDroppedRecords_v2", unsafe {
                (v2.dropped)(h, std::ptr::null_mut(), 0, &mut n)
            })?;
            return Ok(n as u64);
        }
        // Safety: valid out-pointer; NULL context means all.
        check("cuptiActivityGetNumDroppedRecords", unsafe {
            (self.dropped)(std::ptr::null_mut(), 0, &mut n)
        })?;
        Ok(n as u64)
    }

    /// Whether external correlation ids can be pushed (the entry points of
    /// the API flavour in use exist).
    pub fn has_external_correlation(&self) -> bool {
        match self.v2() {
            Some((v2, _)) => v2.push_external.is_some() && v2.pop_external.is_some(),
            None => self.push_external.is_some() && self.pop_external.is_some(),
        }
    }

    /// Push an external correlation id of kind CUSTOM2 (Kineto uses CUSTOM0
    /// and CUSTOM1) on the calling thread. No allocation or lock on our
    /// side; CUPTI keeps a per-thread stack.
    pub fn push_external(&self, id: u64) -> bool {
        let kind = sys::CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
        let code = match self.v2() {
            // Safety: valid handle; plain values.
            Some((v2, h)) => v2.push_external.map(|f| unsafe { f(h, kind, id) }),
            // Safety: plain values.
            None => self.push_external.map(|f| unsafe { f(kind, id) }),
        };
        code == Some(0)
    }

    /// Pop what [`Self::push_external`] pushed on this thread.
    pub fn pop_external(&self) {
        let kind = sys::CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
        let mut last = 0u64;
        match self.v2() {
            // Safety: valid handle and out-pointer.
            Some((v2, h)) => {
                if let Some(f) = v2.pop_external {
                    unsafe { f(h, kind, &mut last) };
                }
            }
            None => {
                if let Some(f) = self.pop_external {
                    // Safety: valid out-pointer.
                    unsafe { f(kind, &mut last) };
                }
            }
        }
    }

    /// `cuptiGetTimestamp`.
    pub fn timestamp(&self) -> Result<u64, CallError> {
        let mut t = 0u64;
        // Safety: valid out-pointer.
        check("cuptiGetTimestamp", unsafe { (self.timestamp)(&mut t) })?;
        Ok(t)
    }

    /// Ask for `gettid`-style thread ids in API records.
    pub fn use_system_thread_ids(&self) -> Result<(), CallError> {
        if let Some((v2, h)) = self.v2() {
            let mut value: u32 = sys::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM;
            let mut size = std::mem::size_of::<u32>();
            // Safety: valid handle; value/size describe a u32.
            return check("cuptiActivitySetAttribute_v2", unsafe {
                (v2.set_attribute)(
                    h,
                    sys::CUPTI_ACTIVITY_ATTR_THREAD_ID_TYPE,
                    &mut size,
                    &mut value as *mut u32 as *mut libc::c_void,
                )
            });
        }
        // Safety: plain value call.
        check("cuptiSetThreadIdType", unsafe {
            (self.set_thread_id_type)(sys::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        })
    }

    /// Walk to the next record in a completed buffer. `Ok(None)` at the end.
    ///
    /// # Safety
    /// `buf` must be a buffer CUPTI completed with `valid` bytes, and
    /// `cursor` null on the first call, then the previous return value.
    pub unsafe fn next_record(&self, buf: *mut u8, valid: usize, cursor: &mut *mut sys::CUpti_Activity) -> Result<bool, CallError> {
        let code = match self.v2() {
            // Safety: upheld by the caller; valid handle.
            Some((v2, h)) => unsafe { (v2.next_record)(h, buf, valid, cursor) },
            // Safety: upheld by the caller.
            None => unsafe { (self.next_record)(buf, valid, cursor) },
        };
        match code {
            0 => Ok(true),
            MAX_LIMIT_REACHED => Ok(false),
            code => Err(CallError::cupti("cuptiActivityGetNextRecord", code)),
        }
    }
}
