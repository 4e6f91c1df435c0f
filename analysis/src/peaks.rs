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

const fn row(device: &'static str, bf16: f64, fp8: Option<f64>, tf32: f64) -> DevicePeak {
    DevicePeak {
        device,
        bf16: Some(bf16),
        fp16: Some(bf16),
        fp8,
        tf32: Some(tf32),
    }
}

/// (lower-case substrings that must all occur in the name, row). First match wins, so
/// more specific entries (`h100` + `pcie`, `gb200`, `l40s`, `a100`) come before the
/// names they contain (`h100`, `b200`, `l4`, `a10`).
const TABLE: &[(&[&str], DevicePeak)] = &[
    (&["gb200"], row("GB200 (per GPU, NVL72)", 2500.0, Some(5000.0), 1250.0)),
    (&["b200"], row("B200 (HGX)", 2250.0, Some(4500.0), 1125.0)),
    (&["h200", "nvl"], row("H200 NVL", 835.5, Some(1670.5), 417.5)),
    (&["h200"], row("H200 SXM", 989.5, Some(1979.0), 494.5)),
    (&["h100", "pcie"], row("H100 PCIe", 756.5, Some(1513.0), 378.0)),
    (&["h100", "nvl"], row("H100 NVL", 835.5, Some(1670.5), 417.5)),
    (&["h100"], row("H100 SXM", 989.5, Some(1979.0), 494.5)),
    (&["h800"], row("H800 SXM", 989.5, Some(1979.0), 494.5)),
    (&["a100"], row("A100 (SXM and PCIe)", 312.0, None, 156.0)),
    (&["a800"], row("A800", 312.0, None, 156.0)),
    (&["l40s"], row("L40S", 362.05, Some(733.0), 183.0)),
    (&["l4"], row("L4", 121.0, Some(242.5), 60.0)),
    (&["a10g"], row("A10G (as A10)", 125.0, None, 62.5)),
    (&["a10"], row("A10", 125.0, None, 62.5)),
    (&["mi325x"], row("MI325X", 1307.4, Some(2614.9), 653.7)),
    (&["mi300x"], row("MI300X", 1307.4, Some(2614.9), 653.7)),
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
        assert_eq!(dev("NVIDIA A100-SXM4-80GB"), Some("A100 (SXM and PCIe)"));
        assert_eq!(dev("NVIDIA A100 80GB PCIe"), Some("A100 (SXM and PCIe)"));
        assert_eq!(dev("NVIDIA B200"), Some("B200 (HGX)"));
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
