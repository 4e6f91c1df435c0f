//! Amounts in words: GPU time in a unit that fits it, dollars, numbers with an SI prefix.

/// GPU time in a unit that fits it: `12.34 GPU-hours`, `3.2 GPU-minutes`, `4.5 GPU-seconds`,
/// `4.484 GPU-ms`, `3.700 GPU-µs`; `none` for zero.
pub fn gpu_time(hours: f64) -> String {
    let s = hours * 3600.0;
    if hours <= 0.0 {
        "none".into()
    } else if hours >= 1.0 {
        format!("{hours:.2} GPU-hours")
    } else if s >= 60.0 {
        format!("{:.1} GPU-minutes", s / 60.0)
    } else if s >= 1.0 {
        format!("{s:.2} GPU-seconds")
    } else if s >= 1e-3 {
        format!("{:.3} GPU-ms", s * 1e3)
    } else {
        format!("{:.3} GPU-µs", s * 1e6)
    }
}

/// `$0.0123` (four decimals below a dollar, two above; `under $0.0001` for less).
pub fn usd(v: f64) -> String {
    if v > 0.0 && v < 0.00005 {
        "under $0.0001".into()
    } else if v.abs() < 1.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}

/// `18.2 k`, `3.4 M`: three significant-ish digits with an SI prefix.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1} G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1} M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}
