//! The part of NVTX v3's injection ABI the agent uses, written by hand from
//! the vendored headers (`tests/doubles/nvtx3/nvtxDetail/nvtxTypes.h`,
//! `nvToolsExt.h`). The layout is pinned by the test at the bottom, which
//! compiles a C program against those headers and compares every size and
//! offset.

use std::ffi::c_void;

/// `NVTX_ETID_CALLBACKS`: the export table with `GetModuleFunctionTable`.
pub const ETID_CALLBACKS: u32 = 1;
/// `NVTX_CB_MODULE_CORE` (nvtxMarkA, nvtxRangePushA, …).
pub const MODULE_CORE: i32 = 1;
/// `NVTX_CB_MODULE_CORE2` (the domain functions).
pub const MODULE_CORE2: i32 = 5;

/// `NvtxCallbackIdCore`.
pub mod core {
    pub const MARK_EX: usize = 1;
    pub const MARK_A: usize = 2;
    pub const MARK_W: usize = 3;
    pub const RANGE_START_EX: usize = 4;
    pub const RANGE_START_A: usize = 5;
    pub const RANGE_START_W: usize = 6;
    pub const RANGE_END: usize = 7;
    pub const RANGE_PUSH_EX: usize = 8;
    pub const RANGE_PUSH_A: usize = 9;
    pub const RANGE_PUSH_W: usize = 10;
    pub const RANGE_POP: usize = 11;
    pub const NAME_CATEGORY_A: usize = 12;
    pub const NAME_CATEGORY_W: usize = 13;
    pub const NAME_OS_THREAD_A: usize = 14;
    pub const NAME_OS_THREAD_W: usize = 15;
}

/// `NvtxCallbackIdCore2`.
pub mod core2 {
    pub const DOMAIN_MARK_EX: usize = 1;
    pub const DOMAIN_RANGE_START_EX: usize = 2;
    pub const DOMAIN_RANGE_END: usize = 3;
    pub const DOMAIN_RANGE_PUSH_EX: usize = 4;
    pub const DOMAIN_RANGE_POP: usize = 5;
    pub const DOMAIN_RESOURCE_CREATE: usize = 6;
    pub const DOMAIN_RESOURCE_DESTROY: usize = 7;
    pub const DOMAIN_NAME_CATEGORY_A: usize = 8;
    pub const DOMAIN_NAME_CATEGORY_W: usize = 9;
    pub const DOMAIN_REGISTER_STRING_A: usize = 10;
    pub const DOMAIN_REGISTER_STRING_W: usize = 11;
    pub const DOMAIN_CREATE_A: usize = 12;
    pub const DOMAIN_CREATE_W: usize = 13;
    pub const DOMAIN_DESTROY: usize = 14;
    pub const INITIALIZE: usize = 15;
}

/// `nvtxColorType_t`: an ARGB color is given.
pub const COLOR_ARGB: i32 = 1;
/// `nvtxMessageType_t`.
pub const MESSAGE_ASCII: i32 = 1;
pub const MESSAGE_UNICODE: i32 = 2;
pub const MESSAGE_REGISTERED: i32 = 3;
/// `nvtxPayloadType_t`: how an event's payload bits are read.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Payload {
    /// No payload (`NVTX_PAYLOAD_UNKNOWN`, or a type this agent does not read).
    #[default]
    None = 0,
    U64 = 1,
    I64 = 2,
    F64 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
}

impl Payload {
    /// The type `nvtxEventAttributes_t::payloadType` names.
    pub fn from_abi(payload_type: i32) -> Payload {
        match payload_type {
            1 => Payload::U64,
            2 => Payload::I64,
            3 => Payload::F64,
            4 => Payload::U32,
            5 => Payload::I32,
            6 => Payload::F32,
            _ => Payload::None,
        }
    }
}

/// `nvtxEventAttributes_v2`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventAttributes {
    pub version: u16,
    pub size: u16,
    pub category: u32,
    pub color_type: i32,
    pub color: u32,
    pub payload_type: i32,
    pub reserved0: i32,
    /// The payload union (`ullValue`, `dValue`, `iValue`, … all at offset 0).
    pub payload: u64,
    pub message_type: i32,
    /// The message union (`ascii`, `unicode`, `registered`).
    pub message: *const c_void,
}

/// `NvtxExportTableCallbacks`.
#[repr(C)]
pub struct ExportTableCallbacks {
    pub struct_size: usize,
    /// `int GetModuleFunctionTable(NvtxCallbackModule, NvtxFunctionTable*, unsigned*)`.
    pub get_module_function_table:
        Option<unsafe extern "C" fn(module: i32, out_table: *mut *mut *mut *const c_void, out_size: *mut u32) -> i32>,
}

/// `NvtxGetExportTableFunc_t`.
pub type GetExportTable = Option<unsafe extern "C" fn(id: u32) -> *const c_void>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::path::Path;
    use std::process::Command;

    const PROG: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include <nvToolsExt.h>
int main(void) {
    printf("attr.size %zu\n", sizeof(nvtxEventAttributes_t));
    printf("attr.version %zu\n", offsetof(nvtxEventAttributes_t, version));
    printf("attr.sizefield %zu\n", offsetof(nvtxEventAttributes_t, size));
    printf("attr.category %zu\n", offsetof(nvtxEventAttributes_t, category));
    printf("attr.colorType %zu\n", offsetof(nvtxEventAttributes_t, colorType));
    printf("attr.color %zu\n", offsetof(nvtxEventAttributes_t, color));
    printf("attr.payloadType %zu\n", offsetof(nvtxEventAttributes_t, payloadType));
    printf("attr.payload %zu\n", offsetof(nvtxEventAttributes_t, payload));
    printf("attr.payloadsize %zu\n", sizeof(((nvtxEventAttributes_t*)0)->payload));
    printf("attr.messageType %zu\n", offsetof(nvtxEventAttributes_t, messageType));
    printf("attr.message %zu\n", offsetof(nvtxEventAttributes_t, message));
    printf("etbl.size %zu\n", sizeof(NvtxExportTableCallbacks));
    printf("etbl.GetModuleFunctionTable %zu\n", offsetof(NvtxExportTableCallbacks, GetModuleFunctionTable));
    printf("const %d %d %d %d %d %d %d\n", NVTX_ETID_CALLBACKS, NVTX_CB_MODULE_CORE, NVTX_CB_MODULE_CORE2,
           NVTX_CBID_CORE_NameOsThreadW, NVTX_CBID_CORE2_Initialize, NVTX_MESSAGE_TYPE_REGISTERED, NVTX_PAYLOAD_TYPE_FLOAT);
    printf("payload %d %d %d %d %d %d %d\n", NVTX_PAYLOAD_UNKNOWN, NVTX_PAYLOAD_TYPE_UNSIGNED_INT64,
           NVTX_PAYLOAD_TYPE_INT64, NVTX_PAYLOAD_TYPE_DOUBLE, NVTX_PAYLOAD_TYPE_UNSIGNED_INT32,
           NVTX_PAYLOAD_TYPE_INT32, NVTX_PAYLOAD_TYPE_FLOAT);
    printf("ids %d %d %d %d %d %d\n", NVTX_CBID_CORE_RangePop, NVTX_CBID_CORE_RangeEnd, NVTX_CBID_CORE2_DomainRangePop,
           NVTX_CBID_CORE2_DomainRegisterStringW, NVTX_CBID_CORE2_DomainCreateA, NVTX_CBID_CORE2_DomainResourceCreate);
    return 0;
}
"#;

    #[test]
    fn layout_is_the_c_compilers() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("layout.c");
        std::fs::write(&src, PROG).unwrap();
        let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/doubles/nvtx3");
        let exe = dir.path().join("layout");
        let st = Command::new("gcc")
            .arg("-I")
            .arg(&inc)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .arg("-ldl")
            .status()
            .expect("gcc is needed for this test");
        assert!(st.success());
        let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
        let a = |f: usize| f.to_string();
        let expected = [
            format!("attr.size {}", size_of::<EventAttributes>()),
            format!("attr.version {}", a(offset_of!(EventAttributes, version))),
            format!("attr.sizefield {}", a(offset_of!(EventAttributes, size))),
            format!("attr.category {}", a(offset_of!(EventAttributes, category))),
            format!("attr.colorType {}", a(offset_of!(EventAttributes, color_type))),
            format!("attr.color {}", a(offset_of!(EventAttributes, color))),
            format!("attr.payloadType {}", a(offset_of!(EventAttributes, payload_type))),
            format!("attr.payload {}", a(offset_of!(EventAttributes, payload))),
            format!("attr.payloadsize {}", size_of::<u64>()),
            format!("attr.messageType {}", a(offset_of!(EventAttributes, message_type))),
            format!("attr.message {}", a(offset_of!(EventAttributes, message))),
            format!("etbl.size {}", size_of::<ExportTableCallbacks>()),
            format!(
                "etbl.GetModuleFunctionTable {}",
                offset_of!(ExportTableCallbacks, get_module_function_table)
            ),
            format!(
                "const {ETID_CALLBACKS} {MODULE_CORE} {MODULE_CORE2} {} {} {MESSAGE_REGISTERED} {}",
                core::NAME_OS_THREAD_W,
                core2::INITIALIZE,
                Payload::F32 as u8
            ),
            format!(
                "payload {} {} {} {} {} {} {}",
                Payload::None as u8,
                Payload::U64 as u8,
                Payload::I64 as u8,
                Payload::F64 as u8,
                Payload::U32 as u8,
                Payload::I32 as u8,
                Payload::F32 as u8
            ),
            format!(
                "ids {} {} {} {} {} {}",
                core::RANGE_POP,
                core::RANGE_END,
                core2::DOMAIN_RANGE_POP,
                core2::DOMAIN_REGISTER_STRING_W,
                core2::DOMAIN_CREATE_A,
                core2::DOMAIN_RESOURCE_CREATE
            ),
        ];
        assert_eq!(out.lines().collect::<Vec<_>>(), expected);
    }
}
