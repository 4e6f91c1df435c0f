//! A hostile output directory (#43 item 1): symbolic links planted under the
//! names the next run will use. `gputrace run` and the agent (in child
//! processes, against the C doubles of `tests/doubles`) must never write
//! through them, refuse each with one `gputrace:` line, and keep tracing.
//!
//! The job is `sh -c '...; exec testprog'`: the shell plants the links
//! under its own pid (`$$`, which `exec` hands to testprog, the traced
//! process) and the launcher's (`$PPID`), then becomes the traced process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{agent_lib, doubles, text};

/// The host name as the agent puts it in trace names.
fn host() -> String {
    let mut buf = [0u8; 256];
    // Safety: a valid buffer and its length less the NUL.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) };
    assert_eq!(rc, 0);
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end])
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || ".-_".contains(c) { c } else { '_' })
        .take(64)
        .collect()
}

/// A directory with `traces/` and, outside it, the files links point to.
struct Planted {
    root: tempfile::TempDir,
}

impl Planted {
    fn new() -> Planted {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("traces")).unwrap();
        std::fs::create_dir(root.path().join("outside")).unwrap();
        for v in ["ring", "meta", "record", "trigger"] {
            std::fs::write(root.path().join("outside").join(v), b"precious").unwrap();
        }
        Planted { root }
    }

    fn traces(&self) -> PathBuf {
        self.root.path().join("traces")
    }

    fn outside(&self, name: &str) -> PathBuf {
        self.root.path().join("outside").join(name)
    }

    /// Every file outside is as it was and nothing new was created there.
    fn assert_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(self.root.path().join("outside"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["meta", "record", "ring", "trigger"],
            "nothing new outside the output directory"
        );
        for n in names {
            let now = std::fs::read(self.outside(&n)).unwrap();
            assert!(now == b"precious", "{n} was written through a link ({} bytes now)", now.len());
        }
    }

    /// `gputrace run FLAGS -o traces -- sh -c "PLANT; exec testprog ARGS"`.
    fn run(&self, flags: &[&str], plant: &str, args: &str) -> Output {
        let dbl = doubles();
        let scen = self.root.path().join("scenario");
        std::fs::write(&scen, "kernels 20000 2000 2000\n").unwrap();
        let script = format!(
            "H={host}; O={out}; X={outside}; {plant}; exec {prog} {args}",
            host = host(),
            out = self.traces().display(),
            outside = self.root.path().join("outside").display(),
            prog = dbl.join("testprog").display(),
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_gputrace"))
            .arg("run")
            .args(flags)
            .arg("-o")
            .arg(self.traces())
            .args(["--", "sh", "-c", &script])
            .env("FAKE_CUPTI_SCENARIO", &scen)
            .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
            .env("GPUTRACE_AGENT", agent_lib())
            .env_remove("RANK")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "gputrace run hung");
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }
}

fn lines_with<'a>(stderr: &'a str, what: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.contains(what)).collect()
}

fn traces_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".gtrace"))
        .collect();
    v.sort();
    v
}

#[test]
fn links_where_the_trace_and_the_run_record_go_are_refused_and_the_job_is_traced() {
    let p = Planted::new();
    // A dangling link where the trace goes, a link to a file where the run
    // record's temporary name goes, and 40 dangling links named like traces.
    let plant = "ln -s $X/new-trace $O/$H.p$$.gtrace; ln -s $X/record $O/gputrace-run.$H.$PPID.json.partial; \
                 for i in $(seq 1 40); do ln -s $X/missing-$i $O/planted-$i.gtrace; done";
    let out = p.run(&[], plant, "--ms 300 exit 0");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    p.assert_untouched();
    assert!(!p.outside("new-trace").exists(), "the dangling link's target was created: {err}");
    let traces = traces_in(&p.traces());
    assert_eq!(traces.len(), 1, "{traces:?}: {err}");
    assert!(traces[0].ends_with(".1.gtrace"), "the trace went to the next free name: {traces:?}");
    let t = gputrace_format::TraceFile::open(p.traces().join(&traces[0])).unwrap();
    assert!(t.trailer().is_some() && t.event_total() > 0, "{err}");
    // One line each: the trace name passed over, the run record refused,
    // and one line for all the links named like traces (none "unreadable").
    assert_eq!(lines_with(&err, "symbolic link").len(), 3, "{err}");
    assert_eq!(lines_with(&err, "so this trace goes to").len(), 1, "{err}");
    assert_eq!(lines_with(&err, "could not write the run record").len(), 1, "{err}");
    assert!(lines_with(&err, "unreadable").is_empty(), "{err}");
    assert_eq!(lines_with(&err, "41 symbolic link(s) named like traces").len(), 1, "{err}");
}

#[test]
fn links_where_the_flight_recorder_ring_and_trigger_go_are_refused() {
    let p = Planted::new();
    // SIGUSR2 to the launcher appends to the trigger file: here a link.
    let plant = "ln -s $X/ring $O/.$H.p$$.flight-ring; ln -s $X/trigger $O/.gputrace-flight-trigger; kill -USR2 $PPID; sleep 0.2";
    let out = p.run(&["--flight-recorder", "60s", "--flush-ms", "50"], plant, "--ms 300 exit 7");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    p.assert_untouched();
    // The ring refused: traced normally instead, said once.
    assert_eq!(lines_with(&err, "cannot create the flight recorder's ring").len(), 1, "{err}");
    assert_eq!(traces_in(&p.traces()).len(), 1, "{err}");

    let p = Planted::new();
    let plant = "ln -s $X/meta $O/.$H.p$$.flight-meta";
    let out = p.run(&["--flight-recorder", "60s", "--flush-ms", "50"], plant, "--ms 300 exit 7");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    p.assert_untouched();
    assert_eq!(lines_with(&err, "cannot create the flight recorder's ring").len(), 1, "{err}");
    assert_eq!(traces_in(&p.traces()).len(), 1, "{err}");
    let ring_left = std::fs::read_dir(p.traces())
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".flight-ring"));
    assert!(!ring_left, "the ring made before the meta file was refused is removed");
}

#[test]
fn a_snapshot_is_never_written_through_a_link() {
    let p = Planted::new();
    // The job fails: its ring becomes a trace, whose name and temporary
    // name are links.
    let plant = "ln -s $X/new-trace $O/$H.p$$.gtrace; ln -s $X/record $O/$H.p$$.1.gtrace.partial";
    let out = p.run(&["--flight-recorder", "60s", "--flush-ms", "50"], plant, "--ms 300 exit 7");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    p.assert_untouched();
    assert!(!p.outside("new-trace").exists(), "{err}");
    assert_eq!(
        lines_with(&err, "could not turn the flight recorder").len(),
        1,
        "the refused snapshot is one line: {err}"
    );
}
