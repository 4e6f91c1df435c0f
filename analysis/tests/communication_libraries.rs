//! Communication beyond NCCL: kernels of each library, named as those projects'
//! sources name them, are communication, with their library and operation; the
//! user's rules override the built-in ones; HTA-compatible mode keeps HTA's numbers.

use gputrace_analysis::*;
use gputrace_format::*;
use gputrace_text::render_text;
use std::collections::BTreeMap;
use std::path::Path;

mod util;
use util::*;

const MS: u64 = 1_000_000;

/// (kernel name as the library's source or a vendored copy names it, library, operation).
const LIBRARY_KERNELS: &[(&str, &str, &str)] = &[
    (
        "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)",
        "DeepEP",
        "dispatch",
    ),
    ("void deep_ep::internode::combine<__nv_bfloat16, 4, 8>(int4*)", "DeepEP", "combine"),
    (
        "void nccl_ep::internode_ll::dispatch<true, false, 7168>(void const*, void*)",
        "DeepEP",
        "dispatch",
    ),
    (
        "void mscclpp::ep::internode_ll::combine<7168, 9>(void*, void const*)",
        "DeepEP",
        "combine",
    ),
    (
        "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)",
        "vLLM/SGLang custom all-reduce",
        "all_reduce",
    ),
    (
        "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 8>(long*)",
        "PyTorch symmetric memory",
        "all_reduce",
    ),
    (
        "void userbuffers_fp16_sum_inplace_gpu_rr_rs(int, int, int, int, int, int, void**)",
        "TransformerEngine userbuffers",
        "other",
    ),
    ("nvshmemi_transfer_rma_kernel", "NVSHMEM", "other"),
    (
        "void allreduce8<__half>(__half*, __half*, __half*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long, int)",
        "MSCCL++",
        "all_reduce",
    ),
    (
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "NCCL",
        "all_gather",
    ),
    ("void executor_kernel<true>(ucc_ec_cuda_executor_t volatile*, int)", "UCC", "other"),
];

/// Per library kernel at `i * 5 ms`: a 1 ms gemm on stream 7 and the communication kernel
/// from 0.5 ms to 2 ms on stream 9: [0.5, 1) ms hidden under the gemm, [1, 2) ms exposed.
/// Then a compute kernel and a 1 ms peer copy after it, all exposed.
fn job() -> TraceFile {
    let mut b = Builder::new(Header::default());
    for (i, (name, _, _)) in LIBRARY_KERNELS.iter().enumerate() {
        let t = i as u64 * 5 * MS;
        b.kernel(0, 7, "sm90_xmma_gemm_bf16bf16", t, t + MS, 0);
        b.kernel(0, 9, name, t + MS / 2, t + 2 * MS, 0);
    }
    let t = LIBRARY_KERNELS.len() as u64 * 5 * MS;
    b.kernel(0, 7, "void at::native::reduce_kernel<512, 1>(float*)", t, t + MS, 0);
    b.peer_copy(11, t + 2 * MS, t + 3 * MS, 1 << 20, 0);
    b.finish(0)
}

fn by_library(r: &Report) -> BTreeMap<String, BTreeMap<String, u64>> {
    r.totals.time.exposed_communication_by_library_ns.clone()
}

#[test]
fn each_library_is_communication_with_its_operation() {
    let r = analyze(&[job()], &Options::default()).unwrap();
    let mut want: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (_, library, op) in LIBRARY_KERNELS {
        *want.entry(library.to_string()).or_default().entry(op.to_string()).or_insert(0) += MS;
    }
    want.entry("peer copy".into()).or_default().insert("copy".into(), MS);
    assert_eq!(by_library(&r), want);
    let d = &r.ranks[0].devices[0];
    assert_eq!(d.time.exposed_communication_ns, (LIBRARY_KERNELS.len() as u64 + 1) * MS);
    assert_eq!(d.time.communication_ns, LIBRARY_KERNELS.len() as u64 * 3 * MS / 2 + MS);
    // at::native::reduce_kernel is compute, not a "reduce" collective.
    assert_eq!(d.time.compute_ns, (LIBRARY_KERNELS.len() as u64 + 1) * MS);
    let sum: u64 = by_library(&r).values().flat_map(|ops| ops.values()).sum();
    assert_eq!(sum, d.time.exposed_communication_ns);
}

#[test]
fn a_rules_file_overrides_the_built_in_table() {
    let rules = "[[rule]]\npattern = \"nccl_ep::\"\ncategory = \"compute\"\nsource = \"we count NCCL EP as compute\"\n\n\
                 [[rule]]\npattern = \"reduce_kernel<512\"\nlibrary = \"our reduction\"\noperation = \"all_reduce\"\n";
    let classifier = Classifier::default().with_rules_toml(Path::new("rules.toml"), rules).unwrap();
    let opts = Options {
        classifier,
        explain_classes: true,
        ..Options::default()
    };
    let r = analyze(&[job()], &opts).unwrap();
    let lib = by_library(&r);
    // nccl_ep's dispatch is compute now: DeepEP keeps one dispatch of 1 ms.
    assert_eq!(lib["DeepEP"]["dispatch"], MS);
    assert_eq!(lib["our reduction"]["all_reduce"], MS);
    let d = &r.ranks[0].devices[0];
    assert_eq!(d.time.exposed_communication_ns, (LIBRARY_KERNELS.len() as u64 + 1) * MS);

    let rows = r.classification.as_ref().expect("explain_classes fills the classification");
    assert_eq!(rows.len(), opts.classifier.rules().len() + 1);
    assert_eq!(rows[0].origin, "rules.toml:1");
    assert_eq!(rows[0].category, Category::Compute);
    assert_eq!((rows[0].kernels, rows[0].total_ns), (1, 3 * MS / 2));
    assert_eq!(rows[1].origin, "rules.toml:6");
    assert_eq!((rows[1].kernels, rows[1].total_ns), (1, MS));
    let deepep: u64 = rows
        .iter()
        .filter(|u| u.library.as_deref() == Some("DeepEP"))
        .map(|u| u.kernels)
        .sum();
    assert_eq!(deepep, 3);
    let none = rows.last().unwrap();
    assert_eq!(none.library, None);
    assert_eq!(none.kernels, LIBRARY_KERNELS.len() as u64, "the gemms");
    assert_eq!(none.example.as_deref(), Some("sm90_xmma_gemm_bf16bf16"));
    let text = render_text(&r, false);
    assert!(text.contains("Classification: which rule"), "{text}");
    assert!(text.contains("rules.toml:1"), "{text}");
    assert!(text.contains("Exposed communication by library and operation"), "{text}");
    // Without the flag, the report carries no classification.
    assert!(analyze(&[job()], &Options::default()).unwrap().classification.is_none());
}

#[test]
fn hta_mode_keeps_htas_numbers() {
    // HTA calls only names starting with nccl (and a few others) communication: in its
    // mode, the other libraries' kernels are compute, as HTA counts them.
    let opts = Options {
        hta: Some(HtaCompat {
            drop_last_step: false,
            linked_only: false,
            round_to_us: false,
        }),
        ..Options::default()
    };
    let r = analyze(&[job()], &opts).unwrap();
    let lib = by_library(&r);
    assert_eq!(lib.keys().map(String::as_str).collect::<Vec<_>>(), ["NCCL", "peer copy"]);
}
