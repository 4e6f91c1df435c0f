//! Which GPU work is compute, communication or transfer, and for
//! communication, which library and operation it is.
//!
//! One rule table decides it for every command (report, compare, export):
//! the built-in rules ([`DEFAULT_RULES`]), each with its library, the
//! pattern it matches and the source that shows the kernels are
//! communication, and the user's own rules (a TOML file, see
//! [`Classifier::with_rules_toml`], or plain patterns), which are tried
//! first and so override the built-in ones.
//!
//! Invariants:
//! - A kernel's category depends only on its name: the first rule (user rules
//!   first, then the built-in ones in table order) whose pattern is an ASCII
//!   case-insensitive substring of the name decides it; no match is compute.
//! - Copies between two GPUs (CUPTI's peer kind, or different source and
//!   destination devices) are communication; every other copy and every
//!   memset is transfer. No rule changes that.
#![forbid(unsafe_code)]

use gputrace_format::{CopyKind, Memcpy};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

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

/// A built-in rule: a kernel whose name contains `pattern` (ASCII
/// case-insensitive) is communication of `library`.
#[derive(Clone, Copy, Debug)]
pub struct DefaultRule {
    pub library: &'static str,
    /// Lower-case substring of the kernel name.
    pub pattern: &'static str,
    /// The operation every kernel of this rule runs; `None`: read it from the name
    /// ([`operation_from_name`]).
    pub operation: Option<&'static str>,
    /// Where the kernel names come from, and why they are communication.
    pub source: &'static str,
}

const fn rule(library: &'static str, pattern: &'static str, operation: Option<&'static str>, source: &'static str) -> DefaultRule {
    DefaultRule {
        library,
        pattern,
        operation,
        source,
    }
}

/// The built-in communication rules, tried in this order (the first match
/// names the library: the vendored-namespace rules of the DeepEP family come
/// before the library names those namespaces may contain, and RCCL and MSCCL
/// before NCCL, whose types their kernels' parameters name).
pub const DEFAULT_RULES: &[DefaultRule] = &[
    // DeepEP's expert-parallel kernels live in namespaces intranode::, internode:: and
    // internode_ll:: (low latency), and are vendored under other top-level namespaces
    // (nccl_ep::, mscclpp::ep::, mori::moe::deepep::, xen_moe::): the namespace is the
    // stable part of the name.
    rule(
        "DeepEP",
        "deep_ep::",
        None,
        "deepseek-ai/DeepEP csrc/kernels/{intranode,internode,internode_ll}.cu: dispatch/combine kernels that move tokens between GPUs over NVLink and RDMA",
    ),
    rule(
        "DeepEP",
        "internode_ll::",
        None,
        "DeepEP's low-latency namespace (csrc/kernels/internode_ll.cu), also vendored as nccl_ep::internode_ll, mscclpp::ep::internode_ll, mori::moe::deepep::internode_ll",
    ),
    rule(
        "DeepEP",
        "internode::",
        None,
        "DeepEP's inter-node namespace (csrc/kernels/internode.cu), vendored under other top-level namespaces",
    ),
    rule(
        "DeepEP",
        "intranode::",
        None,
        "DeepEP's intra-node namespace (csrc/kernels/intranode.cu), vendored under other top-level namespaces",
    ),
    rule("RCCL", "rccl", None, "ROCm/rccl: rcclGenericKernel and friends (NCCL's API on AMD GPUs)"),
    rule(
        "MSCCL++",
        "mscclpp",
        None,
        "microsoft/mscclpp: kernels in namespace mscclpp:: (channels, executor, ep::)",
    ),
    rule("MSCCL", "msccl", None, "microsoft/msccl: MSCCL's NCCL-based kernels (mscclKernel_*)"),
    rule(
        "NCCL",
        "nccl",
        None,
        "NVIDIA/nccl src/device: ncclKernel_* (≤ 2.18), ncclDevKernel_* (2.19+), ncclSymkDevKernel_*/ncclSymDevKernel_* (symmetric memory, 2.27+), NCCLX forks",
    ),
    rule(
        "NVSHMEM",
        "nvshmem",
        None,
        "NVSHMEM: nvshmemi_*/nvshmemx_* kernels (RMA, collectives, proxies) move data between GPUs",
    ),
    rule(
        "TransformerEngine userbuffers",
        "userbuffers",
        None,
        "NVIDIA/TransformerEngine common/comm_gemm_overlap/userbuffers/userbuffers.cu: userbuffers_* and kuserbuffers_* reduce-scatter/all-gather kernels for comm-GEMM overlap",
    ),
    rule(
        "vLLM/SGLang custom all-reduce",
        "cross_device_reduce",
        Some("all_reduce"),
        "vllm-project/vllm csrc/custom_all_reduce.cuh: cross_device_reduce_1stage/2stage (also in SGLang's sgl-kernel)",
    ),
    rule(
        "PyTorch symmetric memory",
        "symmetric_memory::",
        None,
        "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem: c10d::symmetric_memory:: one_shot/two_shot/multimem all-reduce, all-gather and barrier kernels",
    ),
    rule(
        "PyTorch symmetric memory",
        "_shot_all_reduce",
        Some("all_reduce"),
        "PyTorch symmetric memory one_shot_all_reduce / two_shot_all_reduce kernels",
    ),
    rule(
        "PyTorch symmetric memory",
        "multimem_all_",
        None,
        "PyTorch symmetric memory multimem_all_reduce / multimem_all_gather kernels",
    ),
    rule(
        "TensorRT-LLM custom all-reduce",
        "shotallreduce",
        Some("all_reduce"),
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu: oneShotAllReduceKernel / twoShotAllReduceKernel",
    ),
    rule(
        "TensorRT-LLM custom all-reduce",
        "allreducefusion",
        Some("all_reduce"),
        "NVIDIA/TensorRT-LLM allReduceFusionKernel (all-reduce fused with norm)",
    ),
    rule(
        "UCC",
        "ucc_ec_cuda_executor",
        None,
        "openucx/ucc src/components/ec/cuda: executor_kernel(ucc_ec_cuda_executor_t*) runs UCC's collective reductions and copies",
    ),
];

/// Library of peer-to-peer copies that no collective is linked to.
pub const PEER_COPY_LIBRARY: &str = "peer copy";

/// Where a rule comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Origin {
    /// The built-in table.
    BuiltIn,
    /// A rules file, at this line.
    File { path: PathBuf, line: usize },
    /// A plain pattern (`--comm-pattern`).
    Pattern,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::BuiltIn => f.write_str("built-in"),
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Pattern => f.write_str("--comm-pattern"),
        }
    }
}

/// One classification rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rule {
    pub library: String,
    /// Lower-case substring of the kernel name.
    pub pattern: String,
    /// Compute (a user rule that keeps kernels out of communication) or communication.
    pub category: Category,
    /// The operation of every kernel of the rule; `None`: read from the name.
    pub operation: Option<String>,
    pub source: String,
    pub origin: Origin,
}

/// Index of a rule in its [`Classifier`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u16);

/// A rules file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClassifyError {
    #[error("{path}: cannot read the classification rules: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}: {message}", path.display())]
    Invalid { path: PathBuf, line: usize, message: String },
    #[error("{from}: too many classification rules ({count}; at most {MAX_RULES}, the built-in ones included)")]
    TooMany { from: RulesFrom, count: usize },
    #[error("{}: the classification rules file is larger than {} MiB: not a rules file", path.display(), MAX_RULES_FILE_BYTES >> 20)]
    TooLarge { path: PathBuf },
}

/// Where user rules came from, for [`ClassifyError::TooMany`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RulesFrom {
    /// A rules file.
    File(PathBuf),
    /// `--comm-pattern`s.
    Patterns,
}

impl fmt::Display for RulesFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RulesFrom::File(path) => write!(f, "{}", path.display()),
            RulesFrom::Patterns => f.write_str("--comm-pattern"),
        }
    }
}

/// Rules a classifier holds at most, the built-in ones included: every rule
/// has a [`RuleId`].
pub const MAX_RULES: usize = u16::MAX as usize;

/// Bytes of a rules file read at most (65,535 rules of a few hundred bytes).
pub const MAX_RULES_FILE_BYTES: u64 = 32 << 20;

/// Decides the category of GPU work, and the library and operation of communication.
#[derive(Clone, Debug)]
pub struct Classifier {
    /// User rules first (in the order given), then the built-in ones.
    rules: Vec<Rule>,
    /// How many of `rules` are the user's (they come first).
    user: usize,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            rules: DEFAULT_RULES
                .iter()
                .map(|r| Rule {
                    library: r.library.to_string(),
                    pattern: r.pattern.to_string(),
                    category: Category::Communication,
                    operation: r.operation.map(str::to_string),
                    source: r.source.to_string(),
                    origin: Origin::BuiltIn,
                })
                .collect(),
            user: 0,
        }
    }
}

/// The rules file's shape: `[[rule]]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    rule: Vec<toml::Spanned<FileRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRule {
    pattern: toml::Spanned<String>,
    library: Option<String>,
    category: Option<toml::Spanned<String>>,
    operation: Option<String>,
    source: Option<String>,
}

/// The line numbers of byte offsets in one text: its newlines' offsets,
/// found once, so that naming the line of each of n rules costs log n, not
/// a scan from the start.
struct Lines {
    newlines: Vec<usize>,
}

impl Lines {
    fn new(text: &str) -> Lines {
        Lines {
            newlines: text.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i).collect(),
        }
    }

    /// 1-based line of byte offset `at`.
    fn line_of(&self, at: usize) -> usize {
        self.newlines.partition_point(|&nl| nl < at) + 1
    }
}

impl Classifier {
    /// A classifier with no rules: every kernel is compute.
    pub fn empty() -> Classifier {
        Classifier {
            rules: Vec::new(),
            user: 0,
        }
    }

    /// Add a communication pattern (case-insensitive substring of the kernel name), tried
    /// after the user rules already present and before the built-in rules. Empty patterns
    /// and ones already given are ignored: they would make every kernel communication, or
    /// change nothing.
    pub fn with_pattern(self, pattern: &str) -> Result<Classifier, ClassifyError> {
        self.with_patterns([pattern])
    }

    /// [`Classifier::with_pattern`] of each pattern in turn (in time linear in their
    /// number); an error past [`MAX_RULES`].
    pub fn with_patterns<S: AsRef<str>>(mut self, patterns: impl IntoIterator<Item = S>) -> Result<Classifier, ClassifyError> {
        let mut seen: std::collections::HashSet<String> = self.rules[..self.user].iter().map(|r| r.pattern.clone()).collect();
        let mut new = Vec::new();
        for pattern in patterns {
            let p = pattern.as_ref().trim().to_ascii_lowercase();
            if p.is_empty() || !seen.insert(p.clone()) {
                continue;
            }
            if self.rules.len() + new.len() >= MAX_RULES {
                return Err(ClassifyError::TooMany {
                    from: RulesFrom::Patterns,
                    count: self.rules.len() + new.len() + 1,
                });
            }
            new.push(Rule {
                library: format!("user pattern '{p}'"),
                pattern: p,
                category: Category::Communication,
                operation: None,
                source: "--comm-pattern".into(),
                origin: Origin::Pattern,
            });
        }
        let added = new.len();
        self.rules.splice(self.user..self.user, new);
        self.user += added;
        Ok(self)
    }

    /// Add the rules of a TOML file (see [`Classifier::with_rules_toml`]); a file larger
    /// than [`MAX_RULES_FILE_BYTES`] (`/dev/zero`, a trace given by mistake) is refused
    /// after reading that much.
    pub fn with_rules_file(self, path: &Path) -> Result<Classifier, ClassifyError> {
        use std::io::Read;
        let read_err = |source| ClassifyError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_RULES_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_RULES_FILE_BYTES {
            return Err(ClassifyError::TooLarge { path: path.to_path_buf() });
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            read_err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not UTF-8 text ({e})"),
            ))
        })?;
        self.with_rules_toml(path, &text)
    }

    /// Add the rules of TOML `text` (read from `path`, named in errors), tried before
    /// the rules already present:
    ///
    /// ```toml
    /// [[rule]]
    /// pattern = "my_alltoall"        # required: case-insensitive substring of the kernel name
    /// library = "our MoE layer"      # default: the pattern
    /// category = "communication"     # or "compute", to keep kernels out of communication
    /// operation = "all_to_all"       # default: read from the kernel name
    /// source = "kernels/a2a.cu"      # why; shown by report --explain-classes
    /// ```
    pub fn with_rules_toml(mut self, path: &Path, text: &str) -> Result<Classifier, ClassifyError> {
        let lines = Lines::new(text);
        let invalid = |at: usize, message: String| ClassifyError::Invalid {
            path: path.to_path_buf(),
            line: lines.line_of(at),
            message,
        };
        let file: RulesFile = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            invalid(at, e.message().trim().to_string())
        })?;
        let count = self.rules.len() + file.rule.len();
        if count > MAX_RULES {
            return Err(ClassifyError::TooMany {
                from: RulesFrom::File(path.to_path_buf()),
                count,
            });
        }
        let mut new = Vec::with_capacity(file.rule.len());
        for spanned in file.rule {
            let at = spanned.span().start;
            let r = spanned.into_inner();
            let pattern_at = r.pattern.span().start;
            let pattern = r.pattern.into_inner().trim().to_ascii_lowercase();
            if pattern.is_empty() {
                return Err(invalid(pattern_at, "empty pattern: it would match every kernel".into()));
            }
            let category = match &r.category {
                None => Category::Communication,
                Some(c) => match c.get_ref().as_str() {
                    "communication" => Category::Communication,
                    "compute" => Category::Compute,
                    other => {
                        return Err(invalid(
                            c.span().start,
                            format!("category '{other}': a kernel rule's category is \"communication\" or \"compute\""),
                        ))
                    }
                },
            };
            new.push(Rule {
                library: r.library.unwrap_or_else(|| pattern.clone()),
                pattern,
                category,
                operation: r.operation,
                source: r.source.unwrap_or_default(),
                origin: Origin::File {
                    path: path.to_path_buf(),
                    line: lines.line_of(at),
                },
            });
        }
        let added = new.len();
        // The file's rules keep their order, ahead of everything present.
        self.rules.splice(0..0, new);
        self.user += added;
        Ok(self)
    }

    /// All rules, in the order they are tried.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The patterns of the communication rules, in the order they are tried.
    pub fn patterns(&self) -> Vec<String> {
        self.rules
            .iter()
            .filter(|r| r.category == Category::Communication)
            .map(|r| r.pattern.clone())
            .collect()
    }

    /// Rule `id`.
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[usize::from(id.0)]
    }

    /// The first rule matching kernel `name`, if any.
    pub fn rule_for(&self, name: &str) -> Option<RuleId> {
        // Lower-case once; callers classify once per distinct name, not per event.
        let lower = name.to_ascii_lowercase();
        self.rules
            .iter()
            .position(|r| lower.contains(r.pattern.as_str()))
            .map(|i| RuleId(i as u16))
    }

    /// Category of a kernel by name: communication or compute.
    pub fn kernel(&self, name: &str) -> Category {
        self.rule_for(name).map_or(Category::Compute, |id| self.rule(id).category)
    }

    /// The operation a communication kernel of rule `id` named `name` runs.
    pub fn operation(&self, id: Option<RuleId>, name: &str) -> String {
        match id.and_then(|id| self.rule(id).operation.as_deref()) {
            Some(op) => op.to_string(),
            None => operation_from_name(name).to_string(),
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

/// An operation name lower-cased without separators: `AllToAll`, `all_to_all` → `alltoall`.
pub fn op_key(op: &str) -> String {
    op.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Operations as they appear in names (separators removed, lower case), longest first
/// where one contains another, with their canonical names.
const OPERATIONS: &[(&str, &str)] = &[
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("sendrecv", "send_recv"),
    ("broadcast", "broadcast"),
    ("bcast", "broadcast"),
    ("dispatch", "dispatch"),
    ("combine", "combine"),
    ("barrier", "barrier"),
    ("send", "send"),
    ("recv", "recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("reduce", "reduce"),
];

/// The canonical operation a communication kernel's name shows (`ncclDevKernel_AllReduce_…`
/// → `all_reduce`, `deep_ep::intranode::dispatch<…>` → `dispatch`), or `other`. Template
/// and parameter lists are not read.
pub fn operation_from_name(name: &str) -> &'static str {
    let base = name.split(['(', '<']).next().unwrap_or(name);
    canonical_operation(base).unwrap_or("other")
}

/// The canonical name of an operation spelled any way (`AllReduce`, `all_reduce`,
/// `Recv+Send` → `send_recv`), if it is one of the known operations.
pub fn canonical_operation(op: &str) -> Option<&'static str> {
    let key = op_key(op);
    if key.contains("send") && key.contains("recv") {
        return Some("send_recv");
    }
    OPERATIONS.iter().find(|(k, _)| key.contains(k)).map(|&(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_and_operations_of_real_names() {
        let c = Classifier::default();
        for (name, library, op) in [
            ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "NCCL", "all_reduce"),
            (
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                "NCCL",
                "all_gather",
            ),
            ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "NCCL", "reduce_scatter"),
            ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "NCCL", "send_recv"),
            ("ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf16", "NCCL", "all_reduce"),
            ("void rcclGenericKernel<1, false>(ncclDevComm*)", "RCCL", "other"),
            (
                "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)",
                "DeepEP",
                "dispatch",
            ),
            ("void deep_ep::internode_ll::combine<false, 7168>(void*)", "DeepEP", "combine"),
            (
                "void nccl_ep::internode_ll::dispatch<true, false, 7168>(void const*)",
                "DeepEP",
                "dispatch",
            ),
            ("void mscclpp::ep::internode_ll::combine<7168>(void*)", "DeepEP", "combine"),
            (
                "void mori::moe::deepep::intranode::notify_dispatch(int const*)",
                "DeepEP",
                "dispatch",
            ),
            ("nvshmemi_transfer_rma_kernel", "NVSHMEM", "other"),
            (
                "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)",
                "vLLM/SGLang custom all-reduce",
                "all_reduce",
            ),
            (
                "void c10d::symmetric_memory::two_shot_all_reduce_kernel<bf16>",
                "PyTorch symmetric memory",
                "all_reduce",
            ),
            (
                "void c10d::symmetric_memory::multimem_all_gather_kernel<16>",
                "PyTorch symmetric memory",
                "all_gather",
            ),
            (
                "tensorrt_llm::kernels::oneShotAllReduceKernel<half, 8>",
                "TensorRT-LLM custom all-reduce",
                "all_reduce",
            ),
            (
                "userbuffers_fp16_sum_inplace_gpu_rr_rs(int, int, int)",
                "TransformerEngine userbuffers",
                "other",
            ),
            ("void executor_kernel<true>(ucc_ec_cuda_executor_t volatile*, int)", "UCC", "other"),
        ] {
            let id = c.rule_for(name).unwrap_or_else(|| panic!("{name}: no rule"));
            assert_eq!(c.rule(id).library, library, "{name}");
            assert_eq!(c.kernel(name), Category::Communication, "{name}");
            assert_eq!(c.operation(Some(id), name), op, "{name}");
        }
        for name in [
            "sm90_xmma_gemm_bf16bf16",
            "flash_fwd_kernel",
            "void at::native::reduce_kernel<512, 1>",
            "triton_per_fused_sum_0",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
        ] {
            assert_eq!(c.kernel(name), Category::Compute, "{name}");
            assert_eq!(c.rule_for(name), None, "{name}");
        }
    }

    #[test]
    fn the_docs_list_every_built_in_rule_in_order() {
        let doc = include_str!("../../docs/classify.md");
        let mut at = 0;
        for (i, r) in DEFAULT_RULES.iter().enumerate() {
            let row = format!("| {} | {} | `{}` |", i + 1, r.library, r.pattern);
            let found = doc[at..]
                .find(&row)
                .unwrap_or_else(|| panic!("docs/classify.md lacks, or misorders, {row}"));
            at += found + row.len();
        }
    }

    #[test]
    fn every_default_pattern_is_lower_case_and_sourced() {
        for r in DEFAULT_RULES {
            assert_eq!(r.pattern, r.pattern.to_ascii_lowercase());
            assert!(!r.pattern.is_empty() && !r.source.is_empty() && !r.library.is_empty());
        }
    }

    #[test]
    fn user_patterns_come_first_and_empty_is_ignored() {
        let c = Classifier::default()
            .with_pattern("  MyComm_ ")
            .and_then(|c| c.with_pattern(""))
            .and_then(|c| c.with_pattern("mycomm_"))
            .unwrap();
        assert_eq!(c.kernel("void mycomm_alltoall<4>()"), Category::Communication);
        assert_eq!(c.rules().len(), DEFAULT_RULES.len() + 1);
        assert_eq!(c.rules()[0].origin, Origin::Pattern);
        assert_eq!(Classifier::empty().kernel("ncclDevKernel_AllReduce"), Category::Compute);
    }

    #[test]
    fn rules_file_overrides_and_names_lines() {
        let text = "# ours\n[[rule]]\npattern = \"nccl_ep\"\ncategory = \"compute\"\nsource = \"we count it as compute\"\n\n[[rule]]\npattern = \"My_A2A\"\nlibrary = \"moe\"\noperation = \"all_to_all\"\n";
        let c = Classifier::default().with_rules_toml(Path::new("r.toml"), text).unwrap();
        let nccl_ep = "void nccl_ep::internode_ll::dispatch<true>(void const*)";
        assert_eq!(c.kernel(nccl_ep), Category::Compute);
        let id = c.rule_for("my_a2a_kernel").unwrap();
        assert_eq!(c.rule(id).library, "moe");
        assert_eq!(c.operation(Some(id), "my_a2a_kernel"), "all_to_all");
        assert_eq!(
            c.rule(id).origin,
            Origin::File {
                path: "r.toml".into(),
                line: 7
            }
        );
        // Built-in rules still apply after the user's.
        assert_eq!(c.kernel("ncclDevKernel_AllReduce"), Category::Communication);
    }

    #[test]
    fn rules_file_errors_name_the_line() {
        let cases = [
            ("[[rule]]\npattern = \"a\"\ncategory = \"transfer\"\n", 3, "category 'transfer'"),
            ("[[rule]]\npattern = \"  \"\n", 2, "empty pattern"),
            ("[[rule]]\npattern = \"a\"\ncolour = \"red\"\n", 3, "colour"),
            ("[[rule]]\nlibrary = \"x\"\n", 1, "pattern"),
            ("[[rule]]\npattern = \"a\n", 2, ""),
        ];
        for (text, line, needle) in cases {
            let e = Classifier::default().with_rules_toml(Path::new("bad.toml"), text).unwrap_err();
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("bad.toml:{line}: ")), "{text:?}: {msg}");
            assert!(msg.contains(needle), "{text:?}: {msg}");
        }
        let e = Classifier::default()
            .with_rules_file(Path::new("/nonexistent/rules.toml"))
            .unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/rules.toml: cannot read"), "{e}");
    }

    #[test]
    fn rule_limits_name_their_source() {
        // A file: 65,535 rules besides the built-in ones are too many, and the
        // error names the file (it named nothing).
        let n = MAX_RULES - DEFAULT_RULES.len() + 1;
        let text: String = (0..n).map(|i| format!("[[rule]]\npattern = \"k{i}_\"\n")).collect();
        let e = Classifier::default().with_rules_toml(Path::new("many.toml"), &text).unwrap_err();
        assert!(e.to_string().starts_with("many.toml: too many classification rules"), "{e}");
        let ok = Classifier::default().with_rules_toml(Path::new("many.toml"), &text[text.find("[[rule]]\npattern = \"k1_\"").unwrap()..]);
        let c = ok.unwrap();
        assert_eq!(c.rules().len(), MAX_RULES);
        // The line of the last rule, found without rescanning the text.
        let last = c.rule(RuleId((n - 2) as u16));
        assert_eq!(
            last.origin,
            Origin::File {
                path: "many.toml".into(),
                line: 2 * (n - 1) - 1
            }
        );
        assert_eq!(c.rule(c.rule_for("x_k65000_y").unwrap()).pattern, "k65000_");
        // Patterns: capped too, never a rule number that wraps past 65,535.
        let patterns: Vec<String> = (0..MAX_RULES).map(|i| format!("p{i}_")).collect();
        let e = Classifier::default().with_patterns(&patterns).unwrap_err();
        assert!(e.to_string().starts_with("--comm-pattern: too many classification rules"), "{e}");
        let fits = &patterns[..MAX_RULES - DEFAULT_RULES.len()];
        let c = Classifier::default().with_patterns(fits).unwrap();
        let id = c.rule_for("x_p65000_y").unwrap();
        assert_eq!(c.rule(id).pattern, "p65000_");
    }

    #[test]
    fn an_endless_rules_file_is_refused_after_the_cap() {
        let e = Classifier::default().with_rules_file(Path::new("/dev/zero")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/dev/zero: the classification rules file is larger than 32 MiB"),
            "{e}"
        );
    }

    #[test]
    fn operations_are_canonical() {
        assert_eq!(canonical_operation("AllReduce"), Some("all_reduce"));
        assert_eq!(canonical_operation("all_to_all"), Some("all_to_all"));
        assert_eq!(canonical_operation("AlltoAll"), Some("all_to_all"));
        assert_eq!(canonical_operation("Recv+Send"), Some("send_recv"));
        assert_eq!(canonical_operation("ReduceScatter"), Some("reduce_scatter"));
        assert_eq!(canonical_operation("Broadcast"), Some("broadcast"));
        assert_eq!(canonical_operation("unattributed"), None);
    }
}
