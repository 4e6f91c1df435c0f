//! The job id: the partition key that keeps jobs apart in one output
//! directory, so a re-export replaces its own job's files and no other's.
//!
//! Two sources, in this order:
//! 1. **Run id**: every rank's header carries the same `gputrace.run_id`
//!    (set by `gputrace run`: its pid and start time, unique per launch).
//!    The id is `run-<run id>`.
//! 2. **Content hash**: otherwise (imports, the demo, ranks launched by
//!    several `gputrace run`s), `h-` and 16 hex digits of XXH3-64 over what
//!    identifies each rank's recording, in rank order: rank, host, pid, world
//!    size, command, start clock readings, header extras (but the imported
//!    file's name), and the events' count and time span from the file's
//!    index.
//!
//! Both are stable: they depend only on the traces' contents, not on file
//! names, paths, the gputrace version, export flags (`--align`, `--job`) or
//! when the export ran. So exporting the same traces again gives the same id
//! and replaces the earlier export; traces of another recording give another
//! id. A content hash covers the set of ranks given: exporting a subset of a
//! job's rank files is another job.

use gputrace_format::TraceFile;
use std::fmt;
use std::hash::Hasher;

/// Header extra written by `gputrace run`'s agent.
pub const RUN_ID_KEY: &str = "gputrace.run_id";

/// Header extra naming the imported file (left out of the hash: renaming a
/// file does not make another job).
const IMPORT_SOURCE_KEY: &str = "import.source";

/// Where a [`JobId`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobIdSource {
    /// The ranks' common `gputrace.run_id`.
    RunId,
    /// A hash of the ranks' identities.
    ContentHash,
}

impl JobIdSource {
    /// The name in the `runs` table's `job_id_source` column.
    pub fn name(self) -> &'static str {
        match self {
            JobIdSource::RunId => "run-id",
            JobIdSource::ContentHash => "content-hash",
        }
    }
}

/// A job's partition key: ASCII letters, digits and dashes only, so it is a
/// safe directory name and never parses as a number in an engine's
/// partition-type inference.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId {
    id: String,
    source: JobIdSource,
}

impl JobId {
    /// The id of the job made of `ranks` (rank, trace).
    pub fn of(ranks: &[(u32, &TraceFile)]) -> JobId {
        let mut sorted: Vec<(u32, &TraceFile)> = ranks.to_vec();
        sorted.sort_by_key(|(rank, _)| *rank);
        let run_ids: Vec<Option<&String>> = sorted.iter().map(|(_, t)| t.header().extra.get(RUN_ID_KEY)).collect();
        if let Some(Some(first)) = run_ids.first() {
            if is_run_id(first) && run_ids.iter().all(|r| *r == Some(*first)) {
                return JobId {
                    id: format!("run-{first}"),
                    source: JobIdSource::RunId,
                };
            }
        }
        JobId {
            id: format!("h-{:016x}", content_hash(&sorted)),
            source: JobIdSource::ContentHash,
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// Where it came from.
    pub fn source(&self) -> JobIdSource {
        self.source
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// A run id as `gputrace run` makes them (1 to 64 digits and dashes); a
/// header may hold anything, and the id becomes a directory name.
fn is_run_id(v: &str) -> bool {
    (1..=64).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit() || b == b'-')
}

/// XXH3-64 (seed 0) of the ranks' identities, every field length-prefixed so
/// that no two different inputs give the same byte stream.
fn content_hash(sorted: &[(u32, &TraceFile)]) -> u64 {
    let mut h = twox_hash::XxHash3_64::with_seed(0);
    let mut bytes = |b: &[u8]| {
        h.write(&(b.len() as u64).to_le_bytes());
        h.write(b);
    };
    bytes(b"gputrace job id 1");
    for (rank, t) in sorted {
        let hd = t.header();
        bytes(&rank.to_le_bytes());
        bytes(hd.hostname.as_bytes());
        bytes(&hd.pid.to_le_bytes());
        bytes(&hd.rank.world_size.unwrap_or(0).to_le_bytes());
        bytes(&(hd.command.len() as u64).to_le_bytes());
        for arg in &hd.command {
            bytes(arg.as_bytes());
        }
        let c = &hd.start_clock;
        bytes(&c.realtime_ns.to_le_bytes());
        bytes(&c.monotonic_ns.to_le_bytes());
        bytes(&c.cupti_ns.unwrap_or(0).to_le_bytes());
        for (k, v) in hd.extra.iter().filter(|(k, _)| k.as_str() != IMPORT_SOURCE_KEY) {
            bytes(k.as_bytes());
            bytes(v.as_bytes());
        }
        bytes(&t.event_total().to_le_bytes());
        let (lo, hi) = t.time_span().map_or((0, 0), |(a, b)| (a.0, b.0));
        bytes(&lo.to_le_bytes());
        bytes(&hi.to_le_bytes());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_checked() {
        assert!(is_run_id("123-456"));
        assert!(!is_run_id(""));
        assert!(!is_run_id("../x"));
        assert!(!is_run_id(&"1".repeat(65)));
    }
}
