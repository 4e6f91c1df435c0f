//! Which GPU work is communication.
//!
//! A kernel is communication when its name contains one of the
//! [`Classifier`]'s patterns (ASCII case-insensitive); every other kernel is
//! compute. Copies between two GPUs (peer-to-peer) are communication; every
//! other copy and every memset is transfer.

use gputrace_format::{CopyKind, Memcpy};
use serde::Serialize;

/// What a piece of GPU work counts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// Kernels that advance the model (everything that is not communication).
    Compute,
    /// Collective and point-to-point communication kernels, peer-to-peer copies.
    Communication,
    /// Host/device copies, device-to-device copies on one GPU, memsets.
    Transfer,
}

impl Category {
    /// Bit of this category in an overlap mask (compute 1, communication 2, transfer 4).
    pub const fn bit(self) -> u8 {
        match self {
            Category::Compute => 1,
            Category::Communication => 2,
            Category::Transfer => 4,
        }
    }

    /// Lower-case name used in output.
    pub fn name(self) -> &'static str {
        match self {
            Category::Compute => "compute",
            Category::Communication => "communication",
            Category::Transfer => "transfer",
        }
    }
}

/// The default communication-kernel patterns, each with the library it
/// catches. Matching is a case-insensitive substring test on the kernel name
/// as recorded (mangled or demangled), so `void ncclDevKernel_...(...)` and
/// `_Z20ncclKernel_...` both match `nccl`.
pub const DEFAULT_COMM_PATTERNS: &[(&str, &str)] = &[
    // ncclKernel_* (NCCL ≤ 2.18), ncclDevKernel_* (2.19+), ncclSymkDevKernel_* /
    // ncclSymDevKernel_* (symmetric-memory kernels, 2.27+), NCCLX forks.
    (
        "nccl",
        "NCCL, every naming era (ncclKernel_*, ncclDevKernel_*, ncclSymkDevKernel_*, ncclSymDevKernel_*)",
    ),
    ("rccl", "RCCL (AMD)"),
    ("msccl", "MSCCL / MSCCL++"),
    ("deep_ep", "DeepEP expert-parallel dispatch/combine (namespace deep_ep::)"),
    ("nvshmem", "NVSHMEM-based kernels (nvshmemi_*, nvshmemx collectives)"),
    ("cross_device_reduce", "vLLM / SGLang custom all-reduce"),
    (
        "_shot_all_reduce",
        "PyTorch symmetric-memory one_shot_all_reduce / two_shot_all_reduce",
    ),
    (
        "multimem_all_",
        "PyTorch symmetric-memory multimem_all_reduce / multimem_all_gather",
    ),
    ("shotallreduce", "TensorRT-LLM oneShotAllReduceKernel / twoShotAllReduceKernel"),
    ("allreducefusion", "TensorRT-LLM allReduceFusionKernel"),
];

/// Decides which kernels are communication: the documented defaults
/// ([`DEFAULT_COMM_PATTERNS`]) plus the user's own patterns.
#[derive(Clone, Debug)]
pub struct Classifier {
    /// Lower-cased substrings; a kernel name containing any of them is communication.
    patterns: Vec<String>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            patterns: DEFAULT_COMM_PATTERNS.iter().map(|(p, _)| p.to_string()).collect(),
        }
    }
}

impl Classifier {
    /// A classifier with no patterns: every kernel is compute.
    pub fn empty() -> Classifier {
        Classifier { patterns: Vec::new() }
    }

    /// Add a pattern (case-insensitive substring of the kernel name). Empty
    /// patterns are ignored: they would make every kernel communication.
    pub fn with_pattern(mut self, pattern: &str) -> Classifier {
        let p = pattern.trim().to_ascii_lowercase();
        if !p.is_empty() && !self.patterns.contains(&p) {
            self.patterns.push(p);
        }
        self
    }

    /// The patterns in use, lower-cased.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Category of a kernel by name: communication or compute.
    pub fn kernel(&self, name: &str) -> Category {
        // Lower-case once; names are classified once per string id, not per event.
        let lower = name.to_ascii_lowercase();
        if self.patterns.iter().any(|p| lower.contains(p.as_str())) {
            Category::Communication
        } else {
            Category::Compute
        }
    }

    /// Category of a copy: peer-to-peer copies are communication, all others transfer.
    pub fn memcpy(&self, m: &Memcpy) -> Category {
        if is_peer_copy(m) {
            Category::Communication
        } else {
            Category::Transfer
        }
    }
}

/// A copy between two GPUs: CUPTI's peer kind, or different source and destination devices.
pub fn is_peer_copy(m: &Memcpy) -> bool {
    m.kind == CopyKind::PTOP || m.src_device != m.dst_device
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_eras_rccl_and_others() {
        let c = Classifier::default();
        for name in [
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf16",
            "ncclSymDevKernel_AllGather_LL",
            "void rcclGenericKernel<1, false>(ncclDevComm*)",
            "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)",
            "nvshmemi_transfer_rma_kernel",
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)",
            "void c10d::symmetric_memory::two_shot_all_reduce_kernel<bf16>",
            "tensorrt_llm::kernels::oneShotAllReduceKernel<half, 8>",
        ] {
            assert_eq!(c.kernel(name), Category::Communication, "{name}");
        }
        for name in [
            "sm90_xmma_gemm_bf16bf16",
            "flash_fwd_kernel",
            "void at::native::reduce_kernel<512, 1>",
            "triton_per_fused_sum_0",
        ] {
            assert_eq!(c.kernel(name), Category::Compute, "{name}");
        }
    }

    #[test]
    fn user_patterns_extend_and_empty_is_ignored() {
        let c = Classifier::default().with_pattern("  MyComm_ ").with_pattern("");
        assert_eq!(c.kernel("void mycomm_alltoall<4>()"), Category::Communication);
        assert_eq!(c.patterns().len(), DEFAULT_COMM_PATTERNS.len() + 1);
        assert_eq!(Classifier::empty().kernel("ncclDevKernel_AllReduce"), Category::Compute);
    }
}
