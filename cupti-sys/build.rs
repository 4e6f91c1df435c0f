//! Build script for cupti-sys.
//!
//! A normal build does nothing here: the bindings are committed in `src/` and
//! need neither CUDA nor libclang. Only when `CUPTI_INCLUDE_DIR` is set *and*
//! the `regenerate` feature is on does this run bindgen over the CUPTI headers
//! (`generate.sh` sets both). Environment:
//!
//! - `CUPTI_INCLUDE_DIR`: the directory holding `cupti.h`.
//! - `CUPTI_EXTRA_INCLUDE_DIRS`: `:`-separated directories for `cuda.h` and
//!   `crt/host_defines.h` (the runtime and crt/nvcc wheels).
//! - `CUPTI_BINDINGS_LABEL`: provenance written into the file header
//!   (e.g. the wheel versions).
//! - `CUPTI_BINDINGS_OUT`: where to write; default `$OUT_DIR/bindings.rs`.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=wrapper.h");
    for var in [
        "CUPTI_INCLUDE_DIR",
        "CUPTI_EXTRA_INCLUDE_DIRS",
        "CUPTI_BINDINGS_LABEL",
        "CUPTI_BINDINGS_OUT",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let Some(include_dir) = env::var_os("CUPTI_INCLUDE_DIR") else {
        return;
    };
    // A missing output file makes cargo rerun this script; generate.sh relies
    // on that by deleting its output before each build.
    if let Some(out) = env::var_os("CUPTI_BINDINGS_OUT") {
        println!("cargo:rerun-if-changed={}", out.to_string_lossy());
    }

    #[cfg(feature = "regenerate")]
    regenerate::run(std::path::Path::new(&include_dir));

    #[cfg(not(feature = "regenerate"))]
    println!(
        "cargo:warning=CUPTI_INCLUDE_DIR={} is set but the `regenerate` feature is off, \
         so the committed bindings are used unchanged. To regenerate them run \
         cupti-sys/generate.sh",
        include_dir.to_string_lossy()
    );
}

#[cfg(feature = "regenerate")]
mod regenerate {
    use std::env;
    use std::fs;
    use std::path::{Path, PathBuf};

    /// The headers whose declarations we keep (matched as path suffixes).
    const HEADERS: &[&str] = &[
        "cupti_result.h",
        "cupti_version.h",
        "cupti_callbacks.h",
        "cupti_activity.h",
        "cupti_activity_deprecated.h",
        "cupti_common.h",
        "cupti_driver_cbid.h",
        "cupti_runtime_cbid.h",
        "cupti_target.h",
        "cupti_profiler_target.h",
        "cupti_profiler_host.h",
        "cupti_pmsampling.h",
    ];

    /// Record structs a timeline agent never decodes: superseded versions that
    /// no 12.x/13.x library produces, and kinds that are legacy profiling,
    /// environment or interconnect data. Keeps the generated file small.
    const BLOCKED_TYPES: &str = "CUpti_Activity(Kernel[2-8]?|Memcpy[234]?|MemcpyPtoP[23]?|Memset[23]?\
        |Memory|Memory2|MemoryPool|Device[23]?|Marker|Overhead2|CdpKernel|Preemption\
        |Event|EventInstance|Metric|MetricInstance|SourceLocator|GlobalAccess[23]?|Branch2?\
        |DeviceAttribute|Environment.*|InstructionExecution|PCSampling.*|UnifiedMemoryCounter.*\
        |Function|Module|SharedAccess|InstructionCorrelation|OpenAcc.*|OpenMp|NvLink.*|Pcie.*\
        |ConfidentialComputeRotation|Instantaneous.*|Jit2?|MemDecompress|AutoBoostState\
        |ComputeEngineCtxSwitch)(__bindgen.*)?";

    /// Functions whose argument types are blocked above.
    const BLOCKED_FUNCTIONS: &str = "cuptiActivityConfigurePCSampling\
        |cuptiActivityConfigureUnifiedMemoryCounter|cuptiGetAutoBoostState";

    pub fn run(include_dir: &Path) {
        let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
        let mut builder = bindgen::Builder::default()
            .header(manifest_dir.join("wrapper.h").to_string_lossy())
            .clang_arg(format!("-I{}", include_dir.display()))
            .rust_target(bindgen::RustTarget::stable(80, 0).expect("valid rust target"))
            .formatter(bindgen::Formatter::Prettyplease)
            // Never a closed Rust enum: a newer libcupti returns values this
            // file does not know, which would be UB in a `#[repr(u32)] enum`.
            .default_enum_style(bindgen::EnumVariation::Consts)
            .prepend_enum_name(false)
            .derive_default(true)
            .layout_tests(true)
            .generate_comments(true)
            .blocklist_type(BLOCKED_TYPES)
            .blocklist_function(BLOCKED_FUNCTIONS);
        if let Some(extra) = env::var_os("CUPTI_EXTRA_INCLUDE_DIRS") {
            for dir in env::split_paths(&extra) {
                builder = builder.clang_arg(format!("-I{}", dir.display()));
            }
        }
        for header in HEADERS {
            builder = builder.allowlist_file(format!(".*/{header}"));
        }
        let bindings = builder
            .generate()
            .expect("bindgen failed; are CUPTI_INCLUDE_DIR and CUPTI_EXTRA_INCLUDE_DIRS right?")
            .to_string();

        let label = env::var("CUPTI_BINDINGS_LABEL").unwrap_or_else(|_| format!("headers in {}", include_dir.display()));
        let text = format!(
            "// @generated by cupti-sys/build.rs (feature `regenerate`, run by generate.sh)\n\
             // from {label}.\n\
             // Do not edit. Functions are emitted as `<name>_t` function-pointer types,\n\
             // never as `extern` declarations, so nothing is linked.\n\n{}",
            functions_to_typedefs(&bindings)
        );

        let out = match env::var_os("CUPTI_BINDINGS_OUT") {
            Some(path) => PathBuf::from(path),
            None => PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("bindings.rs"),
        };
        fs::write(&out, text).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
        println!("cargo:warning=cupti-sys: wrote bindings to {}", out.display());
    }

    /// Rewrites each `extern "C" { pub fn f(..) -> R; }` block that bindgen
    /// emits (one block per function, at column 0) into
    /// `pub type f_t = unsafe extern "C" fn(..) -> R;`, keeping its doc comment.
    fn functions_to_typedefs(bindings: &str) -> String {
        let mut out = String::with_capacity(bindings.len());
        let mut lines = bindings.lines();
        let mut count = 0;
        while let Some(line) = lines.next() {
            if line != "extern \"C\" {" {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            let mut seen_fn = false;
            // Doc comments come as `/** .. */` blocks whose lines may be a bare
            // `}` (C code samples), so track comment depth (Rust nests them).
            let mut comment_depth = 0usize;
            for inner in lines.by_ref() {
                if inner == "}" && comment_depth == 0 {
                    break;
                }
                let in_comment = comment_depth > 0 || inner.trim_start().starts_with("/*");
                comment_depth = (comment_depth + inner.matches("/*").count())
                    .checked_sub(inner.matches("*/").count())
                    .expect("unbalanced block comment");
                let body = inner.strip_prefix("    ").unwrap_or(inner);
                if in_comment {
                    out.push_str(body);
                    out.push('\n');
                } else if let Some(rest) = body.strip_prefix("pub fn ") {
                    assert!(!seen_fn, "extern block with two functions: {rest}");
                    seen_fn = true;
                    let paren = rest.find('(').expect("function without '('");
                    let (name, signature) = rest.split_at(paren);
                    out.push_str(&format!("pub type {name}_t = unsafe extern \"C\" fn{signature}\n"));
                } else {
                    assert!(
                        !body.starts_with("pub static") && !body.starts_with("#[link_name"),
                        "unexpected item in extern block: {body}"
                    );
                    out.push_str(body);
                    out.push('\n');
                }
            }
            assert!(seen_fn, "extern block without a function");
            count += 1;
        }
        assert!(count > 0, "no functions found; bindgen output format changed?");
        out
    }
}
