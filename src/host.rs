//! `gputrace run`'s host sampler: started beside the job, stopped when it
//! ends, its samples written into the job's traces (see docs/host.md).

use gputrace_host::{write, Sampler, SamplerConfig};
use std::ffi::OsString;
use std::path::Path;
use std::time::SystemTime;

/// Start sampling the tree of `child` at `hz` (0: off). A sampler that
/// cannot start is one `gputrace:` line; the job runs on.
pub fn start(child: u32, hz: u32) -> Option<Sampler> {
    if hz == 0 {
        return None;
    }
    let config = SamplerConfig {
        hz,
        ..SamplerConfig::default()
    };
    match Sampler::start(child, config) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("gputrace: host samples: could not start the sampler thread: {e}; no host samples");
            None
        }
    }
}

/// Stop `sampler` and write its samples into the traces in `dir` that this
/// run wrote (since `started`). Problems are one `gputrace:` line each.
pub fn finish(sampler: Sampler, dir: &Path, started: SystemTime, root: u32, command: &[OsString], hostname: &str, flight: bool) {
    let Some(rec) = sampler.finish() else { return };
    let target = write::Target {
        dir,
        since: started,
        root,
        hostname,
        command: command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        tool_version: env!("CARGO_PKG_VERSION"),
        new_trace_for_python: !flight,
    };
    let written = write::into_traces(&rec, &target);
    for p in &written.problems {
        eprintln!("gputrace: {p}");
    }
}
