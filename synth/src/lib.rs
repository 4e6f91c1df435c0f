//! Synthetic data-parallel training jobs, written through the real gputrace
//! writer.
//!
//! **Synthetic data, not a GPU measurement.** Every file is labelled
//! `producer: synthetic` in its header. The generator is the ground truth for
//! tests, the source for scale benchmarks and the data behind `gputrace demo`.
//!
//! Each rank runs `steps` training steps: a data-loader wait on the host, an
//! H2D copy of the batch, forward and backward kernels of `layers` layers
//! (each launched by a `cudaLaunchKernel` call on the main thread), an NCCL
//! all-reduce per gradient bucket on a separate stream (overlapping the rest
//! of the backward pass), an optimizer step and a blocking D2H copy of the
//! loss. One step has a long data-loader stall on every rank, and one rank
//! runs its kernels slower, so the other ranks wait in every all-reduce.
//! Hosts have clock offsets, as real clusters do.
//!
//! The same `(config, rank, step)` always produces the same events: every
//! random draw comes from a generator seeded by those values, which lets the
//! collective schedule be computed in a first pass over all ranks and the
//! files be written one rank at a time in a second.
#![forbid(unsafe_code)]

use gputrace_format::*;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Shape of a synthetic job.
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// Number of ranks (one process, one GPU each).
    pub ranks: u32,
    /// GPUs per node (ranks on one node share a host clock).
    pub gpus_per_node: u32,
    /// Training steps.
    pub steps: u32,
    /// Transformer layers (18 kernels each per step: 6 forward, 12 backward).
    pub layers: u32,
    /// Gradient buckets, i.e. all-reduces per step.
    pub buckets: u32,
    /// Seed for every random draw.
    pub seed: u64,
    /// The rank whose kernels run slower (none: all equal).
    pub slow_rank: Option<u32>,
    /// Kernel duration multiplier on the slow rank.
    pub slow_factor: f64,
    /// Write NCCL collective metadata (communicator, operation, sequence
    /// number) as the NCCL profiler plugin would; without it only the NCCL
    /// kernels identify collectives.
    pub nccl_metadata: bool,
    /// A rank whose network path is slow: its side of every collective
    /// starts `slow_link_ns` late while its GPU and host are on time.
    pub slow_link_rank: Option<u32>,
    /// Delay per collective on `slow_link_rank`.
    pub slow_link_ns: u64,
    /// A rank whose host is slow: its data loader takes `late_host_ns`
    /// longer every step, so it launches late (none: all equal).
    pub late_host_rank: Option<u32>,
    /// Extra host time per step on `late_host_rank`.
    pub late_host_ns: u64,
    /// The step with a long data-loader stall on every rank.
    pub stall_step: Option<u32>,
    /// Length of that stall.
    pub stall_ns: u64,
    /// Normal host time spent fetching a batch before each step.
    pub loader_ns: u64,
    /// Host clocks differ by up to this much (uniform in ±skew per node).
    pub clock_skew_ns: u64,
    /// Bytes of gradients per bucket.
    pub bucket_bytes: u64,
    /// Bytes of the input batch copied host-to-device per step.
    pub batch_bytes: u64,
    /// Wall-clock start of the job (ns since the epoch, before skew).
    pub start_realtime_ns: u64,
    /// Tokens each rank trains per step: with it, every step ends with a gputrace step mark
    /// (`step tokens=N`, an instant in domain `gputrace`, after the optimizer) as the Python
    /// module writes it (none: no step marks).
    pub tokens_per_step: Option<u64>,
    /// Samples each rank handles per step, as the header extra `gputrace.samples_per_step`
    /// (what `gputrace run --samples-per-step` records).
    pub samples_per_step: Option<u64>,
    /// Parameters of the model the scenario trains (header extra `synthetic.model_params`;
    /// `gputrace demo` passes it to the report for MFU).
    pub model_params: Option<f64>,
    /// Write NVML-like GPU counter series at 10 Hz, as the agent's sampler does (utilization,
    /// SM clock and its maximum, power, energy, temperature, throttle reasons, memory used,
    /// PCIe): `slow_rank`'s GPU is power-capped (SM clock at `1 / slow_factor` of its
    /// maximum, the software power cap reason set), which is why its kernels are slower.
    pub gpu_counters: bool,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            ranks: 4,
            gpus_per_node: 8,
            steps: 12,
            layers: 24,
            buckets: 6,
            seed: 0x5eed,
            slow_rank: Some(2),
            slow_factor: 1.3,
            nccl_metadata: true,
            slow_link_rank: None,
            slow_link_ns: 2_000_000,
            late_host_rank: None,
            late_host_ns: 8_000_000,
            stall_step: Some(5),
            stall_ns: 60_000_000,
            loader_ns: 1_500_000,
            clock_skew_ns: 3_000_000,
            bucket_bytes: 64 << 20,
            batch_bytes: 16 << 20,
            start_realtime_ns: 1_790_000_000_000_000_000,
            tokens_per_step: None,
            samples_per_step: None,
            model_params: None,
            gpu_counters: false,
        }
    }
}

impl JobConfig {
    /// Events one rank writes per step (exact).
    pub fn events_per_step(&self) -> u64 {
        let kernels = self.layers as u64 * KERNELS_PER_LAYER as u64 + OPTIMIZER_KERNELS as u64;
        // kernel + launch call each; per bucket: kernel, launch, collective;
        // copies: H2D (+ API), D2H (+ API, + sync); 4 markers (step, fwd, bwd, opt).
        let per_bucket = if self.nccl_metadata { 3 } else { 2 };
        kernels * 2 + self.buckets as u64 * per_bucket + 2 + 3 + 4 + u64::from(self.tokens_per_step.is_some())
    }
}

const KERNELS_PER_LAYER: u32 = 18;
const FORWARD_PER_LAYER: u32 = 6;
const OPTIMIZER_KERNELS: u32 = 12;
const NAME_POOL: usize = 300;
const COMPUTE_STREAM: StreamId = StreamId(7);
const NCCL_STREAM: StreamId = StreamId(13);
const CONTEXT: ContextId = ContextId(1);
const LAUNCH_LATENCY: u64 = 4_000;
const NCCL_BUS_BYTES_PER_NS: f64 = 150.0; // ~150 GB/s
const H2D_BYTES_PER_NS: f64 = 24.0; // ~24 GB/s pinned PCIe Gen5

/// SplitMix64: small, fast, good enough for synthetic jitter.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn seeded(parts: &[u64]) -> Rng {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for p in parts {
            r.0 ^= p.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            r.next();
        }
        r
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// `base` scaled by a factor uniform in [1 - frac, 1 + frac].
    fn jitter(&mut self, base: u64, frac: f64) -> u64 {
        ((base as f64) * (1.0 + frac * (2.0 * self.unit() - 1.0))).max(1.0) as u64
    }
}

/// The ~300 distinct kernel names of a transformer training loop.
fn kernel_names() -> Vec<String> {
    let gemm_tiles = ["128x128", "128x256", "256x128", "64x64", "128x64"];
    let gemm_layouts = ["tn", "nn", "nt"];
    let mut names = Vec::with_capacity(NAME_POOL);
    for t in gemm_tiles {
        for l in gemm_layouts {
            for stages in [3, 4, 5] {
                names.push(format!("sm90_xmma_gemm_bf16bf16_bf16f32_f32_{l}_n_tilesize{t}x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas_stages{stages}"));
            }
        }
    }
    let functors = [
        "MulFunctor<float>",
        "AddFunctor<float>",
        "GeluCUDAKernelImpl",
        "CUDAFunctor_add<c10::BFloat16>",
        "FillFunctor<float>",
        "silu_kernel",
        "sqrt_kernel_cuda",
        "AbsFunctor<float>",
        "div_true_kernel_cuda",
    ];
    for f in functors {
        for v in [1, 2, 4, 8] {
            names.push(format!("void at::native::vectorized_elementwise_kernel<{v}, at::native::{f}, std::array<char*, 3ul> >(int, at::native::{f}, std::array<char*, 3ul>)"));
        }
    }
    let mut i = 0;
    while names.len() < NAME_POOL {
        let fam = ["void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >", "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, \"quoted\\\\path\">, true>", "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>", "triton_poi_fused__to_copy_add_mul_ünïcode"];
        names.push(format!("{}#{i}", fam[i % fam.len()]));
        i += 1;
    }
    names
}

/// Per-kernel-slot fixed properties (same every step, same on every rank).
#[derive(Clone, Copy)]
struct Slot {
    name_index: usize,
    base_ns: u64,
    grid: [u32; 3],
    block: [u32; 3],
    registers: u32,
    shared: u32,
}

fn slots(cfg: &JobConfig) -> Vec<Slot> {
    let n = (cfg.layers * KERNELS_PER_LAYER + OPTIMIZER_KERNELS) as usize;
    let mut rng = Rng::seeded(&[cfg.seed, 1]);
    (0..n)
        .map(|i| {
            // log-uniform 6 µs .. 600 µs, with a few tiny kernels (launch-bound).
            let base = if i % 9 == 4 {
                3_000
            } else {
                (6_000.0 * 100f64.powf(rng.unit())) as u64
            };
            Slot {
                name_index: i % NAME_POOL,
                base_ns: base,
                grid: [1 << (i % 9), 1 + (i % 3) as u32, 1],
                block: [[128, 256, 512][i % 3], 1, 1],
                registers: [32, 64, 128, 168][i % 4],
                shared: [0, 16384, 49152][i % 3],
            }
        })
        .collect()
}

/// What the first pass computes for one rank and step, shared by both passes.
#[derive(Clone, Debug, Default)]
struct StepPlan {
    step_start: u64,
    /// GPU start and end of each all-reduce kernel (true clock).
    allreduce: Vec<(u64, u64)>,
}

/// The collective schedule of a whole job: who waits for whom.
#[derive(Clone, Debug)]
pub struct Schedule {
    plans: Vec<Vec<StepPlan>>, // [rank][step]
    clock_offsets: Vec<i64>,
}

impl Schedule {
    /// Ground-truth clock offset of each rank's host, ns (added to true time).
    pub fn clock_offsets(&self) -> &[i64] {
        &self.clock_offsets
    }
}

/// Rank-local phase A of a step: from step start to the end of backward.
/// Emits nothing unless `emit` is given. Returns the plan's bucket-ready
/// times and the host time when the backward pass was fully launched.
struct RankCtx<'a> {
    cfg: &'a JobConfig,
    slots: &'a [Slot],
    rank: u32,
}

impl RankCtx<'_> {
    fn scale(&self) -> f64 {
        if self.cfg.slow_rank == Some(self.rank) {
            self.cfg.slow_factor
        } else {
            1.0
        }
    }

    fn loader_ns(&self, step: u32, rng: &mut Rng) -> u64 {
        let base = if self.cfg.stall_step == Some(step) {
            self.cfg.stall_ns
        } else {
            rng.jitter(self.cfg.loader_ns, 0.2)
        };
        if self.cfg.late_host_rank == Some(self.rank) {
            base + self.cfg.late_host_ns
        } else {
            base
        }
    }

    /// Simulate the compute stream of one step starting at `t0` (GPU idle,
    /// host free). Calls `sink` for each emitted item.
    fn compute_phase(&self, step: u32, t0: u64, sink: &mut dyn FnMut(Item)) -> (Vec<u64>, u64, u64) {
        let cfg = self.cfg;
        let mut rng = Rng::seeded(&[cfg.seed, 2, self.rank as u64, step as u64]);
        let mut host = t0;
        let loader = self.loader_ns(step, &mut rng);
        sink(Item::MarkerStart(MarkNo::Step, host));
        host += loader;
        // H2D batch copy (pinned, async) on the compute stream.
        let api = rng.jitter(9_000, 0.2);
        let copy_start = host + LAUNCH_LATENCY;
        let copy_end = copy_start + (cfg.batch_bytes as f64 / H2D_BYTES_PER_NS) as u64;
        sink(Item::Copy {
            api: (host, host + api),
            gpu: (copy_start, copy_end),
            kind: CopyKind::HTOD,
            bytes: cfg.batch_bytes,
        });
        host += api;
        let mut gpu_free = copy_end;
        let layers = cfg.layers as usize;
        let fwd = layers * FORWARD_PER_LAYER as usize;
        let total = layers * KERNELS_PER_LAYER as usize;
        let per_bucket = total.saturating_sub(fwd).div_ceil(cfg.buckets.max(1) as usize).max(1);
        let mut ready = Vec::with_capacity(cfg.buckets as usize);
        sink(Item::MarkerStart(MarkNo::Forward, host));
        for (i, slot) in self.slots[..total].iter().enumerate() {
            if i == fwd {
                sink(Item::MarkerEnd(MarkNo::Forward, host));
                sink(Item::MarkerStart(MarkNo::Backward, host));
            }
            let python = rng.jitter(14_000, 0.5);
            let api = rng.jitter(5_000, 0.3);
            host += python;
            let start = (host + LAUNCH_LATENCY).max(gpu_free);
            let end = start + (rng.jitter(slot.base_ns, 0.03) as f64 * self.scale()) as u64;
            sink(Item::Kernel {
                api: (host, host + api),
                gpu: (start, end),
                slot: *slot,
            });
            host += api;
            gpu_free = end;
            if i >= fwd && ((i - fwd + 1) % per_bucket == 0 || i + 1 == total) && ready.len() < cfg.buckets as usize {
                ready.push(end);
            }
        }
        while ready.len() < cfg.buckets as usize {
            ready.push(gpu_free);
        }
        sink(Item::MarkerEnd(MarkNo::Backward, host));
        (ready, host, gpu_free)
    }

    /// Phase C: all-reduce kernels (times from the schedule), optimizer,
    /// blocking loss copy. Returns the step end (host free, GPU idle).
    fn finish_phase(&self, step: u32, plan: &StepPlan, host_after_bwd: u64, gpu_free: u64, sink: &mut dyn FnMut(Item)) -> u64 {
        let cfg = self.cfg;
        let mut rng = Rng::seeded(&[cfg.seed, 3, self.rank as u64, step as u64]);
        // NCCL launches are issued by the autograd hooks as buckets fill; the
        // host issues them right after the backward launches.
        let mut host = host_after_bwd;
        for &(s, e) in &plan.allreduce {
            let api = rng.jitter(7_000, 0.2);
            sink(Item::AllReduce {
                api: (host, host + api),
                gpu: (s, e),
            });
            host += api;
        }
        let comm_done = plan.allreduce.last().map_or(gpu_free, |x| x.1);
        sink(Item::MarkerStart(MarkNo::Optimizer, host));
        let mut gpu = gpu_free.max(comm_done);
        let opt_first = (cfg.layers * KERNELS_PER_LAYER) as usize;
        for slot in &self.slots[opt_first..opt_first + OPTIMIZER_KERNELS as usize] {
            host += rng.jitter(12_000, 0.4);
            let api = rng.jitter(5_000, 0.3);
            let start = (host + LAUNCH_LATENCY).max(gpu);
            let end = start + (rng.jitter(slot.base_ns, 0.03) as f64 * self.scale()) as u64;
            sink(Item::Kernel {
                api: (host, host + api),
                gpu: (start, end),
                slot: *slot,
            });
            host += api;
            gpu = end;
        }
        sink(Item::MarkerEnd(MarkNo::Optimizer, host));
        // loss.item(): a blocking 4-byte D2H copy; the host waits for the GPU.
        let copy_start = gpu.max(host + LAUNCH_LATENCY);
        let copy_end = copy_start + 2_000;
        let api_end = copy_end + 3_000;
        sink(Item::Copy {
            api: (host, api_end),
            gpu: (copy_start, copy_end),
            kind: CopyKind::DTOH,
            bytes: 4,
        });
        sink(Item::Sync {
            span: (host + 1_000, copy_end + 500),
        });
        sink(Item::MarkerEnd(MarkNo::Step, api_end));
        // After optimizer.step() and the loss read: the step mark (with step marks on).
        sink(Item::StepMark(api_end));
        api_end
    }
}

#[derive(Clone, Copy)]
enum MarkNo {
    Step,
    Forward,
    Backward,
    Optimizer,
}

enum Item {
    Kernel {
        api: (u64, u64),
        gpu: (u64, u64),
        slot: Slot,
    },
    Copy {
        api: (u64, u64),
        gpu: (u64, u64),
        kind: CopyKind,
        bytes: u64,
    },
    AllReduce {
        api: (u64, u64),
        gpu: (u64, u64),
    },
    Sync {
        span: (u64, u64),
    },
    MarkerStart(MarkNo, u64),
    MarkerEnd(MarkNo, u64),
    StepMark(u64),
}

/// First pass: simulate every rank's compute and line up the all-reduces.
pub fn schedule(cfg: &JobConfig) -> Schedule {
    let slots = slots(cfg);
    let nodes = cfg.ranks.div_ceil(cfg.gpus_per_node.max(1));
    let mut skew_rng = Rng::seeded(&[cfg.seed, 4]);
    let node_offsets: Vec<i64> = (0..nodes)
        .map(|_| ((skew_rng.unit() * 2.0 - 1.0) * cfg.clock_skew_ns as f64) as i64)
        .collect();
    let clock_offsets = (0..cfg.ranks)
        .map(|r| node_offsets[(r / cfg.gpus_per_node.max(1)) as usize])
        .collect();
    let mut plans = vec![Vec::with_capacity(cfg.steps as usize); cfg.ranks as usize];
    let mut step_start = vec![cfg.start_realtime_ns + 50_000_000; cfg.ranks as usize];
    let mut xfer_rng = Rng::seeded(&[cfg.seed, 5]);
    for step in 0..cfg.steps {
        let mut phase_a = Vec::with_capacity(cfg.ranks as usize);
        for r in 0..cfg.ranks {
            let ctx = RankCtx {
                cfg,
                slots: &slots,
                rank: r,
            };
            phase_a.push(ctx.compute_phase(step, step_start[r as usize], &mut |_| {}));
        }
        // Bucket b starts on a rank when its gradients are ready and the
        // previous all-reduce is done there; it ends for everyone when the
        // last rank has arrived plus the transfer time.
        let mut prev_end = vec![0u64; cfg.ranks as usize];
        let mut allreduce: Vec<Vec<(u64, u64)>> = vec![Vec::new(); cfg.ranks as usize];
        for b in 0..cfg.buckets as usize {
            let starts: Vec<u64> = (0..cfg.ranks as usize)
                .map(|r| {
                    // A slow network path (NIC, proxy) on `slow_link_rank`:
                    // its side of every collective starts late although its
                    // GPU and host are on time.
                    let link = if cfg.slow_link_rank == Some(r as u32) {
                        cfg.slow_link_ns
                    } else {
                        0
                    };
                    phase_a[r].0[b].max(prev_end[r]) + LAUNCH_LATENCY + link
                })
                .collect();
            let last = *starts.iter().max().expect("at least one rank");
            let xfer = xfer_rng.jitter((cfg.bucket_bytes as f64 / NCCL_BUS_BYTES_PER_NS) as u64, 0.05);
            for r in 0..cfg.ranks as usize {
                let end = last + xfer + (r as u64 % 3) * 300;
                allreduce[r].push((starts[r], end));
                prev_end[r] = end;
            }
        }
        for r in 0..cfg.ranks {
            let ctx = RankCtx {
                cfg,
                slots: &slots,
                rank: r,
            };
            let (ready, host, gpu) = phase_a[r as usize].clone();
            let _ = ready;
            let plan = StepPlan {
                step_start: step_start[r as usize],
                allreduce: std::mem::take(&mut allreduce[r as usize]),
            };
            let end = ctx.finish_phase(step, &plan, host, gpu, &mut |_| {});
            step_start[r as usize] = end;
            plans[r as usize].push(plan);
        }
    }
    Schedule { plans, clock_offsets }
}

/// What one rank's file holds.
#[derive(Clone, Debug, Default)]
pub struct RankStats {
    /// Events written.
    pub events: u64,
    /// Bytes written (file size for [`write_job`]; without the trailer for
    /// [`write_rank`]).
    pub bytes: u64,
}

/// The header a synthetic rank's file carries.
pub fn rank_header(cfg: &JobConfig, sched: &Schedule, rank: u32) -> Header {
    let offset = sched.clock_offsets[rank as usize];
    let local = rank % cfg.gpus_per_node.max(1);
    let node = rank / cfg.gpus_per_node.max(1);
    let realtime = (cfg.start_realtime_ns as i64 + offset) as u64;
    let mut extra = std::collections::BTreeMap::new();
    extra.insert(
        "synthetic.note".into(),
        "synthetic job from `gputrace demo`: not a GPU measurement".into(),
    );
    extra.insert("synthetic.clock_offset_ns".into(), offset.to_string());
    extra.insert("synthetic.slow_rank".into(), cfg.slow_rank.map_or("none".into(), |r| r.to_string()));
    extra.insert(
        "synthetic.slow_link_rank".into(),
        cfg.slow_link_rank.map_or("none".into(), |r| r.to_string()),
    );
    extra.insert(
        "synthetic.late_host_rank".into(),
        cfg.late_host_rank.map_or("none".into(), |r| r.to_string()),
    );
    extra.insert(
        "synthetic.stall_step".into(),
        cfg.stall_step.map_or("none".into(), |r| r.to_string()),
    );
    extra.insert("synthetic.seed".into(), cfg.seed.to_string());
    if let Some(n) = cfg.samples_per_step {
        extra.insert("gputrace.samples_per_step".into(), n.to_string());
    }
    if let Some(n) = cfg.model_params {
        extra.insert("synthetic.model_params".into(), format!("{n:e}"));
    }
    Header {
        producer: Producer::Synthetic,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        hostname: format!("synth-node{node:03}"),
        pid: 40_000 + rank,
        rank: RankInfo {
            rank: Some(Rank(rank)),
            local_rank: Some(local),
            world_size: Some(cfg.ranks),
            source: Some("RANK".into()),
        },
        command: vec![
            "torchrun".into(),
            format!("--nproc-per-node={}", cfg.gpus_per_node),
            "train.py".into(),
            "--synthetic".into(),
        ],
        start_clock: ClockPair {
            realtime_ns: realtime,
            monotonic_ns: 1_000_000_000_000 + node as u64 * 7_000_000_000,
            cupti_ns: Some(realtime),
        },
        time_domain: TimeDomain::Realtime,
        cuda: CudaVersions {
            driver: Some(13000),
            runtime: Some(13000),
            cupti: Some(130000),
        },
        devices: vec![DeviceInfo {
            ordinal: DeviceId(local),
            uuid: format!("GPU-5e1f0000-0000-4000-8000-{:012x}", rank),
            name: "Synthetic H200".into(),
            sm_count: 132,
            memory_bytes: 141 << 30,
            compute_capability: (9, 0),
            pci_bus_id: format!("0000:{:02x}:00.0", 0x18 + local),
        }],
        extra,
    }
}

/// Second pass: write one rank's events through `w`.
pub fn write_rank<W: Write>(cfg: &JobConfig, sched: &Schedule, rank: u32, out: W) -> Result<(W, RankStats)> {
    let slots = slots(cfg);
    let header = rank_header(cfg, sched, rank);
    let mut w = TraceWriter::new(out, &header, WriterOptions::default())?;
    if cfg.nccl_metadata {
        w.add_communicators(&[Communicator {
            id: CommId(0x00c0_ffee_d00d_0001),
            name: "default_pg".into(),
            rank,
            nranks: cfg.ranks,
            nodes: cfg.ranks.div_ceil(cfg.gpus_per_node.max(1)),
            plugin_version: 5,
            created: Nanos(header.start_clock.realtime_ns),
        }])?;
    }
    let names = RankNames::intern(&mut w, cfg);
    let offset = sched.clock_offsets[rank as usize];
    let mut em = RankEmitter {
        w,
        cfg,
        names,
        rank,
        device: DeviceId(rank % cfg.gpus_per_node.max(1)),
        offset,
        tid: ThreadId(40_000 + rank),
        corr: 0,
        seq: 0,
        error: None,
        events: 0,
        opened: [0; 4],
    };
    let ctx = RankCtx { cfg, slots: &slots, rank };
    for step in 0..cfg.steps {
        let plan = &sched.plans[rank as usize][step as usize];
        let mut sink = |item: Item| em.item(step, item);
        let (_, host, gpu) = ctx.compute_phase(step, plan.step_start, &mut sink);
        ctx.finish_phase(step, plan, host, gpu, &mut sink);
        if let Some(e) = em.error.take() {
            return Err(e);
        }
    }
    let RankEmitter {
        mut w,
        device,
        events: mut n_events,
        ..
    } = em;
    let end = sched.plans[rank as usize].last().map_or(cfg.start_realtime_ns, |p| p.step_start) as i64 + offset;
    if cfg.gpu_counters {
        let start = sched.plans[rank as usize].first().map_or(cfg.start_realtime_ns, |p| p.step_start) as i64 + offset;
        n_events += write_counters(&mut w, cfg, rank, device, start as u64, end as u64)?;
    }
    let trailer = Trailer {
        end_clock: ClockPair {
            realtime_ns: end as u64,
            monotonic_ns: 0,
            cupti_ns: None,
        },
        ..Trailer::default()
    };
    w.flush()?;
    // Everything but the small trailer is written now.
    let bytes = w.bytes_written();
    let out = w.finish(trailer)?;
    Ok((out, RankStats { events: n_events, bytes }))
}

/// The strings a rank's events name, interned in its writer (in this order, which
/// fixes their ids).
struct RankNames {
    kernels: Vec<StringId>,
    launch: StringId,
    memcpy_async: StringId,
    nccl_kernel: StringId,
    allreduce: StringId,
    bf16: StringId,
    ring: StringId,
    simple: StringId,
    /// forward, backward, optimizer.
    marks: [StringId; 3],
    /// `ProfilerStep#N` of each step.
    steps: Vec<StringId>,
    gputrace_domain: StringId,
    /// The step mark's text, when steps carry a token count.
    step_mark: Option<StringId>,
}

impl RankNames {
    fn intern<W: Write>(w: &mut TraceWriter<W>, cfg: &JobConfig) -> RankNames {
        let kernels = kernel_names().iter().map(|n| w.intern(n)).collect();
        let launch = w.intern("cudaLaunchKernel");
        let memcpy_async = w.intern("cudaMemcpyAsync");
        let nccl_kernel = w.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
        let allreduce = w.intern("AllReduce");
        let bf16 = w.intern("bf16");
        let ring = w.intern("RING");
        let simple = w.intern("Simple");
        let marks = [w.intern("forward"), w.intern("backward"), w.intern("optimizer")];
        let steps = (0..cfg.steps).map(|s| w.intern(&format!("ProfilerStep#{s}"))).collect();
        let gputrace_domain = w.intern("gputrace");
        let step_mark = cfg.tokens_per_step.map(|n| w.intern(&format!("step tokens={n}")));
        RankNames {
            kernels,
            launch,
            memcpy_async,
            nccl_kernel,
            allreduce,
            bf16,
            ring,
            simple,
            marks,
            steps,
            gputrace_domain,
            step_mark,
        }
    }
}

/// Turns a rank's simulated items into events: the runtime call that launched
/// each GPU operation, the operation, and the markers around them.
struct RankEmitter<'a, W: Write> {
    w: TraceWriter<W>,
    cfg: &'a JobConfig,
    names: RankNames,
    rank: u32,
    device: DeviceId,
    /// This rank's clock offset, ns.
    offset: i64,
    /// The main thread, which makes every runtime call.
    tid: ThreadId,
    /// The last correlation id given out.
    corr: u32,
    /// The last collective sequence number given out.
    seq: u64,
    /// The first write error; once set, nothing more is written.
    error: Option<FormatError>,
    events: u64,
    /// Start of the open range of each [`MarkNo`].
    opened: [u64; 4],
}

impl<W: Write> RankEmitter<'_, W> {
    /// A schedule time on this rank's clock.
    #[inline]
    fn t(&self, v: u64) -> Nanos {
        Nanos((v as i64 + self.offset) as u64)
    }

    #[inline]
    fn push(&mut self, e: Event) {
        if self.error.is_none() {
            self.events += 1;
            if let Err(err) = self.w.push(e) {
                self.error = Some(err);
            }
        }
    }

    /// The runtime call on the main thread that launched GPU work, under the current correlation id.
    #[inline]
    fn api_call(&self, api: (u64, u64), cbid: u32, name: StringId) -> Event {
        Event::Api(ApiCall {
            start: self.t(api.0),
            end: self.t(api.1),
            thread: self.tid,
            correlation: CorrelationId(self.corr),
            domain: ApiDomain::RUNTIME,
            cbid,
            name,
            return_value: 0,
        })
    }

    #[inline]
    fn item(&mut self, step: u32, item: Item) {
        match item {
            Item::Kernel { api, gpu, slot } => self.kernel(api, gpu, &slot),
            Item::Copy { api, gpu, kind, bytes } => self.copy(api, gpu, kind, bytes),
            Item::AllReduce { api, gpu } => self.all_reduce(api, gpu),
            Item::Sync { span } => {
                let e = Event::Sync(Sync {
                    start: self.t(span.0),
                    end: self.t(span.1),
                    device: self.device,
                    context: CONTEXT,
                    stream: COMPUTE_STREAM,
                    correlation: CorrelationId(self.corr),
                    kind: SyncKind::STREAM_SYNCHRONIZE,
                    cuda_event: 0,
                });
                self.push(e);
            }
            Item::StepMark(at) => {
                if let Some(name) = self.names.step_mark {
                    let e = Event::Marker(Marker {
                        start: self.t(at),
                        end: self.t(at),
                        thread: self.tid,
                        name,
                        domain: self.names.gputrace_domain,
                        kind: MarkerKind::INSTANT,
                        color: 0,
                    });
                    self.push(e);
                }
            }
            Item::MarkerStart(m, at) => self.opened[m as usize] = at,
            Item::MarkerEnd(m, at) => {
                let name = match m {
                    MarkNo::Step => self.names.steps[step as usize],
                    MarkNo::Forward => self.names.marks[0],
                    MarkNo::Backward => self.names.marks[1],
                    MarkNo::Optimizer => self.names.marks[2],
                };
                let e = Event::Marker(Marker {
                    start: self.t(self.opened[m as usize]),
                    end: self.t(at),
                    thread: self.tid,
                    name,
                    domain: StringId::EMPTY,
                    kind: MarkerKind::RANGE,
                    color: 0,
                });
                self.push(e);
            }
        }
    }

    #[inline]
    fn kernel(&mut self, api: (u64, u64), gpu: (u64, u64), slot: &Slot) {
        self.corr += 1;
        self.push(self.api_call(api, 211, self.names.launch));
        let e = Event::Kernel(Kernel {
            start: self.t(gpu.0),
            end: self.t(gpu.1),
            device: self.device,
            context: CONTEXT,
            stream: COMPUTE_STREAM,
            correlation: CorrelationId(self.corr),
            name: self.names.kernels[slot.name_index],
            grid: slot.grid,
            block: slot.block,
            static_shared_mem: 0,
            dynamic_shared_mem: slot.shared,
            registers: slot.registers,
            graph_id: 0,
            graph_node_id: 0,
        });
        self.push(e);
    }

    #[inline]
    fn copy(&mut self, api: (u64, u64), gpu: (u64, u64), kind: CopyKind, bytes: u64) {
        self.corr += 1;
        self.push(self.api_call(api, 41, self.names.memcpy_async));
        let (src_kind, dst_kind) = if kind == CopyKind::HTOD {
            (MemoryKind::PINNED, MemoryKind::DEVICE)
        } else {
            (MemoryKind::DEVICE, MemoryKind::PAGEABLE)
        };
        let e = Event::Memcpy(Memcpy {
            start: self.t(gpu.0),
            end: self.t(gpu.1),
            device: self.device,
            context: CONTEXT,
            stream: COMPUTE_STREAM,
            correlation: CorrelationId(self.corr),
            kind,
            bytes,
            src_kind,
            dst_kind,
            src_device: self.device,
            dst_device: self.device,
        });
        self.push(e);
    }

    /// The NCCL kernel, and the collective NCCL's plugin reports for it.
    #[inline]
    fn all_reduce(&mut self, api: (u64, u64), gpu: (u64, u64)) {
        self.corr += 1;
        self.seq += 1;
        self.push(self.api_call(api, 211, self.names.launch));
        let e = Event::Kernel(Kernel {
            start: self.t(gpu.0),
            end: self.t(gpu.1),
            device: self.device,
            context: CONTEXT,
            stream: NCCL_STREAM,
            correlation: CorrelationId(self.corr),
            name: self.names.nccl_kernel,
            grid: [16, 1, 1],
            block: [640, 1, 1],
            static_shared_mem: 0,
            dynamic_shared_mem: 4096,
            registers: 96,
            graph_id: 0,
            graph_node_id: 0,
        });
        self.push(e);
        if self.cfg.nccl_metadata {
            let e = Event::Collective(Collective {
                start: self.t(gpu.0),
                end: self.t(gpu.1),
                enqueue: self.t(api.0),
                comm: CommId(0x00c0_ffee_d00d_0001),
                op: self.names.allreduce,
                seq: self.seq,
                count: self.cfg.bucket_bytes / 2,
                datatype: self.names.bf16,
                bytes: self.cfg.bucket_bytes,
                rank: self.rank,
                nranks: self.cfg.ranks,
                root: -1,
                algorithm: self.names.ring,
                protocol: self.names.simple,
                channels: 16,
                device: self.device,
                stream: NCCL_STREAM,
                correlation: CorrelationId(self.corr),
            });
            self.push(e);
        }
    }
}

/// The SM clock's maximum the synthetic GPUs report, MHz (an H100 SXM's).
const MAX_SM_CLOCK_MHZ: u64 = 1980;

/// NVML-like counter samples of one rank's GPU from `start` to `end` (trace time), every
/// 100 ms, as the agent's sampler writes them; the number of events written.
fn write_counters<W: Write>(w: &mut TraceWriter<W>, cfg: &JobConfig, rank: u32, device: DeviceId, start: u64, end: u64) -> Result<u64> {
    use gputrace_format::metric::{self, throttle};
    let throttled = cfg.slow_rank == Some(rank);
    let mut rng = Rng::seeded(&[cfg.seed, rank as u64, 0xc0_u64]);
    let names: Vec<StringId> = [
        metric::GPU_UTIL_PCT,
        metric::MEM_UTIL_PCT,
        metric::SM_CLOCK_MHZ,
        metric::POWER_MW,
        metric::ENERGY_MJ,
        metric::TEMPERATURE_C,
        metric::THROTTLE_REASONS,
        metric::MEM_USED_BYTES,
        metric::PCIE_TX_KBPS,
        metric::PCIE_RX_KBPS,
    ]
    .iter()
    .map(|n| w.intern(n))
    .collect();
    let push = |w: &mut TraceWriter<W>, time: u64, metric: StringId, value: u64| {
        w.push(Event::Counter(Counter {
            time: Nanos(time),
            device,
            metric,
            value,
        }))
    };
    let max = w.intern(metric::SM_CLOCK_MAX_MHZ);
    push(w, start, max, MAX_SM_CLOCK_MHZ)?;
    let mut n = 1;
    // Clocks step in 15 MHz bins; the capped GPU runs at the clock its slower kernels imply.
    let capped = ((MAX_SM_CLOCK_MHZ as f64 / cfg.slow_factor.max(1.0)) / 15.0).round() as u64 * 15;
    let mut energy_mj = 1_000_000_000u64 + rank as u64 * 7_000_000;
    let mut t = start;
    while t <= end {
        let clock = if throttled {
            capped + 15 * (rng.next() % 2)
        } else {
            MAX_SM_CLOCK_MHZ - 15 * (rng.next() % 2)
        };
        let power_mw = if throttled {
            700_000 - rng.next() % 2_000
        } else {
            rng.jitter(560_000, 0.03)
        };
        let values = [
            97 + rng.next() % 3,
            rng.jitter(38, 0.1),
            clock,
            power_mw,
            energy_mj,
            if throttled { 83 } else { 66 } + rng.next() % 3,
            if throttled { throttle::SW_POWER_CAP } else { 0 },
            62 << 30,
            rng.jitter(1_200, 0.2),
            rng.jitter(2_400, 0.2),
        ];
        for (&name, &v) in names.iter().zip(&values) {
            push(w, t, name, v)?;
        }
        n += values.len() as u64;
        energy_mj += power_mw / 10; // mW over 100 ms, in mJ
        t += 100_000_000;
    }
    Ok(n)
}

/// File name for a rank, the same shape the agent uses:
/// `<host>.r<rank>.p<pid>.gtrace`.
pub fn rank_file_name(header: &Header) -> String {
    let rank = header.rank.rank.map_or("x".to_string(), |r| format!("{:05}", r.0));
    format!("{}.r{}.p{}.{}", header.hostname, rank, header.pid, FILE_EXTENSION)
}

/// Write every rank of a job into `dir` (created if missing). Returns the
/// files written, in rank order, with their stats.
pub fn write_job(cfg: &JobConfig, dir: &Path) -> io::Result<Vec<(PathBuf, RankStats)>> {
    std::fs::create_dir_all(dir)?;
    let sched = schedule(cfg);
    let mut out = Vec::with_capacity(cfg.ranks as usize);
    for r in 0..cfg.ranks {
        let path = dir.join(rank_file_name(&rank_header(cfg, &sched, r)));
        let file = io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        let (file, mut stats) = write_rank(cfg, &sched, r, file).map_err(io::Error::other)?;
        let file = file.into_inner().map_err(|e| e.into_error())?;
        stats.bytes = file.metadata()?.len();
        out.push((path, stats));
    }
    Ok(out)
}

/// A one-GPU job planned to read 95% GPU-Util while computing far less: the ground truth of
/// the productive layer (`docs/metrics.md`, "Productive work"). **Synthetic data.**
///
/// Time is cut into `windows` windows of `window_ns` from the first kernel's start `o`.
/// Every window except `idle_windows` holds one kernel of `kernel_ns`: at the window's start,
/// and in the last window at its end, so that the span is exactly `windows × window_ns`
/// (the first and last windows are always busy; listing them as idle has no effect). A
/// step mark `step tokens=<tokens_per_step>` (domain `gputrace`) ends every
/// `windows_per_step` windows; the header says `gputrace.samples_per_step`. Recording
/// starts `startup_ns` before `o` and ends at the span's end.
#[derive(Clone, Debug)]
pub struct Underfilled {
    /// GPU-Util's window.
    pub window_ns: u64,
    /// Windows in the span.
    pub windows: u64,
    /// Windows without a kernel.
    pub idle_windows: Vec<u64>,
    /// The kernel of each busy window.
    pub kernel_ns: u64,
    /// Windows per step.
    pub windows_per_step: u64,
    /// Tokens in each step mark.
    pub tokens_per_step: u64,
    /// Header extra `gputrace.samples_per_step`.
    pub samples_per_step: u64,
    /// Recording before the first kernel.
    pub startup_ns: u64,
    /// The device's name.
    pub device_name: String,
    /// `o`, ns since the epoch.
    pub start_ns: u64,
    /// An `exit ...` instant (domain `gputrace`) at the end, e.g. `exit status=1`.
    pub exit_marker: Option<String>,
    /// Finish the file with a trailer (false: as if the process was killed).
    pub trailer: bool,
    /// Host name in the header.
    pub hostname: String,
}

impl Default for Underfilled {
    fn default() -> Self {
        Underfilled {
            window_ns: 166_666_667,
            windows: 60,
            idle_windows: vec![10, 30, 50],
            kernel_ns: 70_000_000,
            windows_per_step: 6,
            tokens_per_step: 2048,
            samples_per_step: 4,
            startup_ns: 2 * 166_666_667,
            device_name: "NVIDIA H100 80GB HBM3".into(),
            start_ns: 1_790_000_000_000_000_000,
            exit_marker: None,
            trailer: true,
            hostname: "underfilled-node".into(),
        }
    }
}

impl Underfilled {
    /// Windows with a kernel.
    pub fn busy_windows(&self) -> u64 {
        (0..self.windows).filter(|i| !self.is_idle(*i)).count() as u64
    }

    fn is_idle(&self, i: u64) -> bool {
        i != 0 && i + 1 != self.windows && self.idle_windows.contains(&i)
    }

    /// Write the trace.
    pub fn write(&self) -> Result<Vec<u8>> {
        let (o, w_ns) = (self.start_ns, self.window_ns);
        let end = o + self.windows * w_ns;
        let mut extra = std::collections::BTreeMap::new();
        extra.insert(
            "synthetic.note".into(),
            "underfilled ground-truth job: not a GPU measurement".into(),
        );
        extra.insert("gputrace.samples_per_step".into(), self.samples_per_step.to_string());
        let header = Header {
            producer: Producer::Synthetic,
            tool_version: env!("CARGO_PKG_VERSION").into(),
            hostname: self.hostname.clone(),
            pid: 4242,
            start_clock: ClockPair {
                realtime_ns: o - self.startup_ns,
                monotonic_ns: 1,
                cupti_ns: None,
            },
            time_domain: TimeDomain::Realtime,
            devices: vec![DeviceInfo {
                name: self.device_name.clone(),
                sm_count: 132,
                ..DeviceInfo::default()
            }],
            extra,
            ..Header::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default())?;
        let name = w.intern("underfilled_gemv_kernel");
        let domain = w.intern("gputrace");
        let mark = w.intern(&format!("step tokens={}", self.tokens_per_step));
        for i in (0..self.windows).filter(|i| !self.is_idle(*i)) {
            let start = if i + 1 == self.windows {
                end - self.kernel_ns
            } else {
                o + i * w_ns
            };
            w.push(Event::Kernel(Kernel {
                start: Nanos(start),
                end: Nanos(start + self.kernel_ns),
                device: DeviceId(0),
                context: CONTEXT,
                stream: COMPUTE_STREAM,
                correlation: CorrelationId(i as u32 + 1),
                name,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                static_shared_mem: 0,
                dynamic_shared_mem: 0,
                registers: 32,
                graph_id: 0,
                graph_node_id: 0,
            }))?;
        }
        let instant = |at: u64, name: StringId| {
            Event::Marker(Marker {
                start: Nanos(at),
                end: Nanos(at),
                thread: ThreadId(4242),
                name,
                domain,
                kind: MarkerKind::INSTANT,
                color: 0,
            })
        };
        let mut k = 1;
        while k * self.windows_per_step <= self.windows && self.windows_per_step > 0 {
            w.push(instant(o + k * self.windows_per_step * w_ns, mark))?;
            k += 1;
        }
        if let Some(exit) = &self.exit_marker {
            let id = w.intern(exit);
            w.push(instant(end, id))?;
        }
        if !self.trailer {
            w.flush()?;
            return Ok(w.get_mut().clone());
        }
        w.finish(Trailer {
            end_clock: ClockPair {
                realtime_ns: end,
                monotonic_ns: 0,
                cupti_ns: None,
            },
            ..Trailer::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_counted() {
        let cfg = JobConfig {
            ranks: 2,
            steps: 3,
            layers: 4,
            ..JobConfig::default()
        };
        let s = schedule(&cfg);
        let (a, sa) = write_rank(&cfg, &s, 1, Vec::new()).unwrap();
        let (b, _) = write_rank(&cfg, &schedule(&cfg), 1, Vec::new()).unwrap();
        assert_eq!(a, b, "same config, same bytes");
        assert_eq!(sa.events, cfg.events_per_step() * cfg.steps as u64);
        let t = TraceFile::from_bytes("synth", a).unwrap();
        assert_eq!(t.event_total(), sa.events);
        assert_eq!(t.header().producer, Producer::Synthetic);
    }

    #[test]
    fn step_marks_end_every_step() {
        let cfg = JobConfig {
            ranks: 1,
            steps: 3,
            layers: 2,
            tokens_per_step: Some(4096),
            samples_per_step: Some(8),
            ..JobConfig::default()
        };
        let (bytes, stats) = write_rank(&cfg, &schedule(&cfg), 0, Vec::new()).unwrap();
        assert_eq!(stats.events, cfg.events_per_step() * 3, "one mark more per step");
        let t = TraceFile::from_bytes("synth", bytes).unwrap();
        assert_eq!(t.header().extra["gputrace.samples_per_step"], "8");
        let marks: Vec<(u64, String, String)> = t
            .events_of(&[EventKind::Marker])
            .map(|e| e.unwrap())
            .filter_map(|e| match e {
                Event::Marker(m) if m.kind == MarkerKind::INSTANT => {
                    Some((m.start.0, t.name(m.domain).into_owned(), t.name(m.name).into_owned()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(marks.len(), 3);
        assert!(
            marks.iter().all(|(_, d, n)| d == "gputrace" && n == "step tokens=4096"),
            "{marks:?}"
        );
        // Each mark is at the end of its ProfilerStep range.
        let ends: Vec<u64> = t
            .events_of(&[EventKind::Marker])
            .map(|e| e.unwrap())
            .filter_map(|e| match e {
                Event::Marker(m) if t.name(m.name).starts_with("ProfilerStep#") => Some(m.end.0),
                _ => None,
            })
            .collect();
        let mut at: Vec<u64> = marks.iter().map(|m| m.0).collect();
        at.sort_unstable();
        let mut ends = ends;
        ends.sort_unstable();
        assert_eq!(at, ends);
    }

    #[test]
    fn the_underfilled_job_is_as_planned() {
        let u = Underfilled::default();
        let t = TraceFile::from_bytes("u", u.write().unwrap()).unwrap();
        let kernels = t.events_of(&[EventKind::Kernel]).count() as u64;
        assert_eq!(kernels, u.busy_windows());
        assert_eq!(t.time_span().map(|(a, b)| b.0 - a.0), Some(u.windows * u.window_ns));
        assert!(t.trailer().is_some());
        let killed = Underfilled { trailer: false, ..u };
        assert!(TraceFile::from_bytes("k", killed.write().unwrap()).unwrap().trailer().is_none());
    }

    #[test]
    fn allreduces_end_together_and_slow_rank_arrives_last() {
        let cfg = JobConfig {
            ranks: 4,
            steps: 2,
            layers: 6,
            clock_skew_ns: 0,
            ..JobConfig::default()
        };
        let s = schedule(&cfg);
        for step in 0..2 {
            for b in 0..cfg.buckets as usize {
                let starts: Vec<u64> = (0..4).map(|r| s.plans[r][step].allreduce[b].0).collect();
                let ends: Vec<u64> = (0..4).map(|r| s.plans[r][step].allreduce[b].1).collect();
                let spread = ends.iter().max().unwrap() - ends.iter().min().unwrap();
                assert!(spread < 1_000, "ends within 1 µs: {ends:?}");
                let latest = (0..4).max_by_key(|&r| starts[r]).unwrap();
                if b == cfg.buckets as usize - 1 {
                    assert_eq!(latest, 2, "slow rank arrives last: {starts:?}");
                }
            }
        }
    }
}
