//! Dense tensor-core peaks by device name, for MFU.
//!
//! Every number is the vendor's datasheet figure *without* structured sparsity
//! (NVIDIA lists "with sparsity" figures, twice the dense ones; those are halved
//! here), in TFLOPS per GPU. `docs/metrics.md` ("MFU") cites the datasheet of
//! each row. A device that is not in the table, or a precision the device has
//! no tensor-core peak for (FP8 on Ampere), has no peak: pass `--peak-tflops`.

use serde::Serialize;

/// The arithmetic precision the model trains or serves in (the peak MFU is measured against).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// bfloat16 (the default).
    #[default]
    Bf16,
    /// IEEE half precision.
    Fp16,
    /// 8-bit floating point (E4M3/E5M2).
    Fp8,
    /// TensorFloat-32.
    Tf32,
}

impl Precision {
    /// From `bf16`, `fp16`, `fp8` or `tf32` (case-insensitive).
    pub fn parse(s: &str) -> Option<Precision> {
        match s.to_ascii_lowercase().as_str() {
            "bf16" => Some(Precision::Bf16),
            "fp16" => Some(Precision::Fp16),
            "fp8" => Some(Precision::Fp8),
            "tf32" => Some(Precision::Tf32),
            _ => None,
        }
    }

    /// `bf16`, `fp16`, `fp8`, `tf32`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp8 => "fp8",
            Precision::Tf32 => "tf32",
        }
    }
}

/// One row of the table: dense TFLOPS per GPU (`None`: no tensor-core support).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DevicePeak {
    /// The table's name for the device.
    pub device: &'static str,
    /// BF16 dense TFLOPS.
    pub bf16: Option<f64>,
    /// FP16 dense TFLOPS.
    pub fp16: Option<f64>,
    /// FP8 dense TFLOPS.
    pub fp8: Option<f64>,
    /// TF32 dense TFLOPS.
    pub tf32: Option<f64>,
    /// Device memory bandwidth, TB/s (the datasheet's).
    pub dram_tbps: f64,
}

impl DevicePeak {
    /// The peak at `p`, TFLOPS.
    pub fn tflops(&self, p: Precision) -> Option<f64> {
        match p {
            Precision::Bf16 => self.bf16,
            Precision::Fp16 => self.fp16,
            Precision::Fp8 => self.fp8,
            Precision::Tf32 => self.tf32,
        }
    }
}

const fn row(device: &'static str, bf16: f64, fp8: Option<f64>, tf32: f64, dram_tbps: f64) -> DevicePeak {
    DevicePeak {
        device,
        bf16: Some(bf16),
        fp16: Some(bf16),
        fp8,
        tf32: Some(tf32),
        dram_tbps,
    }
}

/// (lower-case substrings that must all occur in the name, row). First match wins, so
/// more specific entries (`h100` + `pcie`, `gb200`, `l40s`, `a100`) come before the
/// names they contain (`h100`, `b200`, `l4`, `a10`).
const TABLE: &[(&[&str], DevicePeak)] = &[
    (&["gb200"], row("GB200 (per GPU, NVL72)", 2500.0, Some(5000.0), 1250.0, 8.0)),
    (&["b200"], row("B200 (HGX, 1,000 W)", 2250.0, Some(4500.0), 1125.0, 7.7)),
    (&["h200", "nvl"], row("H200 NVL", 835.5, Some(1670.5), 417.5, 4.8)),
    (&["h200"], row("H200 SXM", 989.5, Some(1979.0), 494.5, 4.8)),
    (&["h100", "pcie"], row("H100 PCIe", 756.5, Some(1513.0), 378.0, 2.0)),
    (&["h100", "nvl"], row("H100 NVL", 835.5, Some(1670.5), 417.5, 3.9)),
    (&["h100"], row("H100 SXM", 989.5, Some(1979.0), 494.5, 3.35)),
    (&["h800"], row("H800 SXM", 989.5, Some(1979.0), 494.5, 3.35)),
    (&["a100", "pcie", "80gb"], row("A100 PCIe 80GB", 312.0, None, 156.0, 1.935)),
    (&["a100", "80gb"], row("A100 SXM 80GB", 312.0, None, 156.0, 2.039)),
    (&["a100"], row("A100 40GB", 312.0, None, 156.0, 1.555)),
    (&["a800"], row("A800 80GB", 312.0, None, 156.0, 2.039)),
    (&["l40s"], row("L40S", 362.05, Some(733.0), 183.0, 0.864)),
    (&["l4"], row("L4", 121.0, Some(242.5), 60.0, 0.3)),
    (&["a10g"], row("A10G (as A10)", 125.0, None, 62.5, 0.6)),
    (&["a10"], row("A10", 125.0, None, 62.5, 0.6)),
    (&["mi325x"], row("MI325X", 1307.4, Some(2614.9), 653.7, 6.0)),
    (&["mi300x"], row("MI300X", 1307.4, Some(2614.9), 653.7, 5.3)),
];

/// The table row for a device name as CUDA reports it (`NVIDIA H100 80GB HBM3`,
/// `NVIDIA A100-SXM4-80GB`, `AMD Instinct MI300X`), or `None` for an unknown device.
pub fn device_peak(name: &str) -> Option<DevicePeak> {
    let lower = name.to_ascii_lowercase();
    // Whole words only for the short names: `l4` must not match `l40`, nor `a10` `a100`.
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let has = |needle: &str| {
        if needle.len() <= 3 {
            words.contains(&needle)
        } else {
            lower.contains(needle)
        }
    };
    TABLE.iter().find(|(needles, _)| needles.iter().all(|n| has(n))).map(|(_, p)| *p)
}

/// Substrings of GEMM kernel names (cuBLAS, cuBLASLt's nvjet, CUTLASS, CK, Triton matmuls).
const GEMM_MARKS: &[&str] = &[
    "gemm", "nvjet", "cutlass", "xmma", "cublas", "wgmma", "hmma", "matmul", "bmm", "_mma",
];

/// The precision a GEMM kernel's name says it computes in, if any: `e4m3`/`e5m2`/`fp8` are
/// FP8, `bf16`/`bfloat16` BF16, `tf32` TF32, `fp16`/`f16`/`half` FP16 (checked after BF16,
/// whose name contains `f16`). `None` for a kernel that is not a GEMM or names none.
pub fn gemm_precision(name: &str) -> Option<Precision> {
    let n = name.to_ascii_lowercase();
    if !GEMM_MARKS.iter().any(|m| n.contains(m)) {
        return None;
    }
    if ["e4m3", "e5m2", "fp8", "f8f8"].iter().any(|m| n.contains(m)) {
        Some(Precision::Fp8)
    } else if n.contains("bf16") || n.contains("bfloat16") {
        Some(Precision::Bf16)
    } else if n.contains("tf32") {
        Some(Precision::Tf32)
    } else if ["fp16", "f16", "half"].iter().any(|m| n.contains(m)) {
        Some(Precision::Fp16)
    } else {
        None
    }
}

/// The precision most GEMM time ran in, from `(kernel name, total ns)` pairs, with its
/// share of the GEMM time whose precision the names show; `None` when no name shows one.
pub fn infer_precision<'a>(kernels: impl Iterator<Item = (&'a str, u64)>) -> Option<(Precision, f64)> {
    let mut by: [(Precision, u64); 4] = [
        (Precision::Fp8, 0),
        (Precision::Bf16, 0),
        (Precision::Fp16, 0),
        (Precision::Tf32, 0),
    ];
    for (name, ns) in kernels {
        if let Some(p) = gemm_precision(name) {
            if let Some(slot) = by.iter_mut().find(|(q, _)| *q == p) {
                slot.1 += ns;
            }
        }
    }
    let total: u64 = by.iter().map(|b| b.1).sum();
    // Most time first; on a tie the first listed (the higher peak).
    let best = by.iter().fold(by[0], |best, x| if x.1 > best.1 { *x } else { best });
    (total > 0).then(|| (best.0, best.1 as f64 / total as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_cuda_reports_them() {
        let dev = |n: &str| device_peak(n).map(|p| p.device);
        assert_eq!(dev("NVIDIA H100 80GB HBM3"), Some("H100 SXM"));
        assert_eq!(dev("NVIDIA H100 PCIe"), Some("H100 PCIe"));
        assert_eq!(dev("NVIDIA H100 NVL"), Some("H100 NVL"));
        assert_eq!(dev("NVIDIA H200"), Some("H200 SXM"));
        assert_eq!(dev("NVIDIA H200 NVL"), Some("H200 NVL"));
        assert_eq!(dev("NVIDIA GH200 480GB"), Some("H200 SXM"), "the Hopper die of a GH200");
        assert_eq!(dev("NVIDIA A100-SXM4-80GB"), Some("A100 SXM 80GB"));
        assert_eq!(dev("NVIDIA A100 80GB PCIe"), Some("A100 PCIe 80GB"));
        assert_eq!(dev("NVIDIA A100-SXM4-40GB"), Some("A100 40GB"));
        assert_eq!(dev("NVIDIA B200"), Some("B200 (HGX, 1,000 W)"));
        assert_eq!(dev("NVIDIA GB200"), Some("GB200 (per GPU, NVL72)"));
        assert_eq!(dev("NVIDIA L4"), Some("L4"));
        assert_eq!(dev("NVIDIA L40S"), Some("L40S"));
        assert_eq!(dev("NVIDIA L40"), None, "L40 (not S) is not in the table");
        assert_eq!(dev("NVIDIA A10G"), Some("A10G (as A10)"));
        assert_eq!(dev("NVIDIA A10"), Some("A10"));
        assert_eq!(dev("AMD Instinct MI300X"), Some("MI300X"));
        assert_eq!(dev("AMD Instinct MI325X"), Some("MI325X"));
        assert_eq!(dev("Synthetic H200"), Some("H200 SXM"));
        assert_eq!(dev("NVIDIA GeForce RTX 4090"), None);
        assert_eq!(dev(""), None);
    }

    /// The rows against NVIDIA's datasheets (dense, no sparsity), as issue #42 lists them:
    /// (name as CUDA reports it, bf16 TFLOPS, fp8 TFLOPS, TB/s). The datasheets print the
    /// sparse figure; its half (989.5 for H100 SXM) is within 1 TFLOPS of the rounded dense one.
    #[test]
    fn the_table_matches_the_datasheets() {
        let sheets: &[(&str, f64, Option<f64>, f64)] = &[
            ("NVIDIA H100 80GB HBM3", 989.0, Some(1979.0), 3.35),
            ("NVIDIA H100 PCIe", 756.0, Some(1513.0), 2.0),
            ("NVIDIA H200", 989.0, Some(1979.0), 4.8),
            ("NVIDIA A100-SXM4-80GB", 312.0, None, 2.04),
            ("NVIDIA B200", 2250.0, Some(4500.0), 7.7),
            ("NVIDIA L40S", 362.0, Some(733.0), 0.864),
        ];
        for &(name, bf16, fp8, tbps) in sheets {
            let row = device_peak(name).unwrap_or_else(|| panic!("{name} is in the table"));
            let near = |a: Option<f64>, b: f64, tol: f64| a.is_some_and(|a| (a - b).abs() <= tol);
            assert!(near(row.bf16, bf16, 1.0), "{name} bf16 {:?} against {bf16}", row.bf16);
            match fp8 {
                Some(fp8) => assert!(near(row.fp8, fp8, 1.0), "{name} fp8 {:?} against {fp8}", row.fp8),
                None => assert_eq!(row.fp8, None, "{name} has no FP8 tensor cores"),
            }
            assert!(
                (row.dram_tbps - tbps).abs() <= 0.005,
                "{name} {} TB/s against {tbps}",
                row.dram_tbps
            );
        }
    }

    #[test]
    fn precision_from_gemm_names() {
        let p = gemm_precision;
        assert_eq!(
            p("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128"),
            Some(Precision::Fp8)
        );
        assert_eq!(
            p("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT"),
            None,
            "a GEMM that names no precision"
        );
        assert_eq!(
            p("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"),
            Some(Precision::Bf16)
        );
        assert_eq!(p("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32"), Some(Precision::Fp16));
        assert_eq!(p("ampere_sgemm_tf32_128x64_nn"), Some(Precision::Tf32));
        assert_eq!(p("void at::native::vectorized_elementwise_kernel<4, bf16>"), None, "not a GEMM");
        // Most GEMM time wins; kernels that name no precision do not vote.
        let k = [
            ("sm90_xmma_gemm_e4m3bf16_e4m3f32", 700),
            ("ampere_bf16_s16816gemm_bf16", 300),
            ("nvjet_tst_64x64", 5_000),
            ("elementwise_bf16", 9_000),
        ];
        let (prec, share) = infer_precision(k.iter().map(|&(n, t)| (n, t))).unwrap();
        assert_eq!(prec, Precision::Fp8);
        assert!((share - 0.7).abs() < 1e-12);
        assert_eq!(infer_precision([("nvjet_tst", 1u64)].into_iter()), None);
    }

    #[test]
    fn precisions() {
        let h100 = device_peak("NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!(h100.tflops(Precision::Bf16), Some(989.5));
        assert_eq!(h100.tflops(Precision::Fp8), Some(1979.0));
        assert_eq!(device_peak("NVIDIA A100-SXM4-40GB").unwrap().tflops(Precision::Fp8), None);
        assert_eq!(Precision::parse("BF16"), Some(Precision::Bf16));
        assert_eq!(Precision::parse("int8"), None);
    }
}
