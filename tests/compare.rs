//! `gputrace compare` end to end on the demo's synthetic job.

mod common;

use std::process::Command;

#[test]
fn compare_names_the_demo_straggler() {
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_gputrace");
    let demo = dir.path().join("demo");
    let st = Command::new(exe)
        .args(["demo", "--ranks", "6", "--steps", "6", "--layers", "4", "-o"])
        .arg(&demo)
        .output()
        .unwrap();
    assert!(st.status.success());
    let svg = dir.path().join("late.svg");
    let out = Command::new(exe)
        .arg("compare")
        .arg("--json")
        .arg("--heatmap")
        .arg(&svg)
        .arg(&demo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The demo makes rank ranks/2 slow on its GPU.
    assert_eq!(v["stragglers"][0]["rank"], 3);
    assert_eq!(v["stragglers"][0]["cause"], "gpu");
    assert!(v["stragglers"][0]["score"].as_f64().unwrap() > 0.9);
    assert_eq!(v["clock"]["offsets_ns"].as_object().unwrap().len(), 6);
    assert_eq!(v["ranks"].as_array().unwrap().len(), 6);
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

    // One rank is not a comparison: a clear error, exit 2.
    let one = std::fs::read_dir(&demo)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "gtrace"))
        .unwrap();
    let out = Command::new(exe).arg("compare").arg(&one).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least two ranks"));
}

#[test]
fn real_hta_rank_pair_agrees_with_hta_straggler() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/traces/facebookresearch_HolisticTraceAnalysis@f4d0062/tests/data/trace_filter");
    if !dir.exists() {
        common::shared_traces_absent(&format!("{} not found", dir.display()));
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("compare")
        .arg("--json")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // reference_numbers.csv: HTA potential_stragglers_k1 = 1.
    assert_eq!(
        v["stragglers"][0]["rank"],
        1,
        "{}",
        serde_json::to_string_pretty(&v["ranks"]).unwrap()
    );
    assert_eq!(v["matching"], "order", "Kineto kernels without collective metadata match by order");
}

#[test]
fn compare_has_steps_p50_and_tokens_per_second() {
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_gputrace");
    let demo = dir.path().join("demo");
    let st = Command::new(exe)
        .args(["demo", "--ranks", "3", "--steps", "5", "--layers", "3", "-o"])
        .arg(&demo)
        .output()
        .unwrap();
    assert!(st.status.success());
    let out = Command::new(exe).arg("compare").arg("--json").arg(&demo).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut sum = 0.0;
    for r in v["ranks"].as_array().unwrap() {
        assert_eq!(r["step_count"], 5, "{r}");
        assert!(r["step_time_p50_s"].as_f64().unwrap() > 0.0);
        let t = r["tokens_per_s"].as_f64().unwrap();
        assert!(t > 0.0);
        sum += t;
        assert_eq!(r["outcome"], "succeeded");
    }
    let job = v["tokens_per_s"].as_f64().unwrap();
    assert!(
        (job - sum).abs() < 1e-6 * sum,
        "the job's tokens/s is the ranks' sum: {job} vs {sum}"
    );
    // The same numbers as `gputrace report`.
    let rep = Command::new(exe).arg("report").arg("--json").arg(&demo).output().unwrap();
    let rv: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
    assert_eq!(rv["productive"]["tokens_per_s"].as_f64().unwrap(), job);
    let text = Command::new(exe).arg("compare").arg(&demo).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("p50 step ms") && text.contains("tokens/s") && text.contains("job: "),
        "{text}"
    );
}

/// The ranks `report`'s `stragglers` findings name are the ones `compare` names.
fn same_stragglers(dir: &std::path::Path) -> Vec<u64> {
    let exe = env!("CARGO_BIN_EXE_gputrace");
    let c = Command::new(exe).args(["compare", "--json"]).arg(dir).output().unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    let c: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap();
    let r = Command::new(exe).args(["report", "--json"]).arg(dir).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let r: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let from_compare: Vec<u64> = c["stragglers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rank"].as_u64().unwrap())
        .collect();
    let from_report: Vec<u64> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "stragglers")
        .map(|f| f["values"]["rank"].as_f64().unwrap() as u64)
        .collect();
    assert_eq!(
        from_report,
        from_compare,
        "{}",
        serde_json::to_string_pretty(&r["findings"]).unwrap()
    );
    from_compare
}

#[test]
fn report_and_compare_name_the_same_straggler() {
    let dir = tempfile::tempdir().unwrap();
    common::demo(dir.path(), 6, 6, 4);
    assert_eq!(same_stragglers(dir.path()), [3]);
    let hta = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/traces/facebookresearch_HolisticTraceAnalysis@f4d0062/tests/data/trace_filter");
    if !hta.exists() {
        common::shared_traces_absent(&format!("{} not found", hta.display()));
        return;
    }
    assert_eq!(same_stragglers(&hta), [1]);
}

#[test]
fn poor_clock_alignment_is_said() {
    let exe = env!("CARGO_BIN_EXE_gputrace");
    let dir = tempfile::tempdir().unwrap();
    common::demo(dir.path(), 3, 4, 4);
    let v = |dir: &std::path::Path| -> serde_json::Value {
        let out = Command::new(exe).args(["compare", "--json"]).arg(dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let demo = v(dir.path());
    assert_eq!(demo["clock"]["poor"], false);
    assert!(demo["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| !w.as_str().unwrap().contains("alignment")));
    // The HTA pair: two ranks of a 128-rank job whose SendRecvs pair with other ranks;
    // after alignment their collectives still end 28 ms apart.
    let hta = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/traces/facebookresearch_HolisticTraceAnalysis@f4d0062/tests/data/trace_filter");
    if !hta.exists() {
        common::shared_traces_absent(&format!("{} not found", hta.display()));
        return;
    }
    let pair = v(&hta);
    assert_eq!(pair["clock"]["poor"], true, "{}", pair["clock"]);
    assert!(pair["clock"]["residual_ns"].as_u64().unwrap() > 20_000_000);
    let warnings: Vec<&str> = pair["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    assert!(warnings.iter().any(|w| w.starts_with("clock alignment is poor")), "{warnings:?}");
    let out = Command::new(exe).args(["report", "--json"]).arg(&hta).output().unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "stragglers")
        .unwrap();
    assert!(f["evidence"].as_str().unwrap().contains("clock alignment is poor"), "{f}");
}

/// The heatmap as a picture: rsvg-convert (librsvg) renders it to a PNG of the
/// document's size, for a one-step 8-rank job and a 1,024-rank job.
#[test]
fn heatmap_renders_as_a_png_of_its_size() {
    let rsvg = std::env::var_os("RSVG_CONVERT").unwrap_or_else(|| "rsvg-convert".into());
    if Command::new(&rsvg).arg("--version").output().is_err() {
        let msg = "rsvg-convert not found (Debian package librsvg2-bin): heatmap PNG test skipped";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{msg}; under CI=true it must be installed (.ci/run does)"
        );
        common::skip(msg);
        return;
    }
    let exe = env!("CARGO_BIN_EXE_gputrace");
    for (ranks, steps) in [(8u32, 1u32), (1024, 2)] {
        let dir = tempfile::tempdir().unwrap();
        common::demo(dir.path(), ranks, steps, 1);
        let svg = dir.path().join("late.svg");
        let out = Command::new(exe)
            .arg("compare")
            .arg("--heatmap")
            .arg(&svg)
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(&svg).unwrap();
        let attr = |k: &str| -> u32 {
            text.split(&format!("{k}=\""))
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let (w, h) = (attr("width"), attr("height"));
        let png = dir.path().join("late.png");
        let st = Command::new(&rsvg).arg(&svg).arg("-o").arg(&png).output().unwrap();
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
        assert_eq!((be(16), be(20)), (w, h), "{ranks}×{steps}");
        assert!(text.contains("µs</text>"), "a colour scale in µs");
        if ranks == 8 {
            assert!(text.contains("◀ straggler (rank 4)"), "{text}");
        }
    }
}
